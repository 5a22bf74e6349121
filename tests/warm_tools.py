"""Run ``python tools/NAME.py ...`` without paying for the imports each time.

The docs' command blocks call the tools dozens of times, and importing the
package with the three toolboxes takes longer than most of those commands
run.  ``serve(path)`` imports them once and listens on a Unix socket; run as
a script, this file is a ``python`` that hands a ``tools/*.py`` command to
that server, which forks and runs the tool (or ``python -``'s script on
standard input) as ``__main__`` in the caller's directory, environment,
arguments and standard streams (passed over the socket) and returns its exit
status.  Any other command, or no server, runs the real interpreter.  A
forked child starts from freshly imported modules, so the tool sees what a
new interpreter gives it.  With
:data:`DRY_VARIABLE` set, a tool command (also one
``tools/dist_train.sh`` launches through ``-m torch.distributed.run``) runs
dry (:mod:`dry_tools`).
"""

import contextlib
import json
import os
import runpy
import signal
import socket
import sys
import threading
import traceback

#: Where the client finds the server's socket.
SOCKET_VARIABLE = 'HETDPT_WARM_TOOLS'
#: What the tools import, directly or through their configs' registries.
PRELOAD = (
    'hetdpt_mm.apis',
    'mmpretrain.models',
    'mmpretrain.datasets',
    'mmpretrain.evaluation',
    'mmpretrain.engine',
    'mmdet.models',
    'mmdet.datasets',
    'mmdet.evaluation',
    'mmdet.engine',
    'mmseg.models',
    'mmseg.datasets',
    'mmseg.evaluation',
    'mmseg.engine',
)
STREAMS = 3
#: Set (to 1) in a command's environment to run its tools dry.
DRY_VARIABLE = 'HETDPT_DRY_TOOLS'


def is_tool_command(args) -> bool:
    """``tools/NAME.py ...``, or ``-``: a script on standard input."""
    return bool(args) and (
        args[0] == '-'
        or (args[0].startswith('tools/') and args[0].endswith('.py'))
    )


def read_toolbox_indexes_once() -> None:
    """MMEngine reads every metafile of a toolbox to find one of its configs
    (``'mmdet::...'``, about a second); read them once, before the forks."""
    from functools import lru_cache
    from importlib.util import find_spec

    from mmengine.config import utils

    utils.load = lru_cache(maxsize=None)(utils.load)
    for toolbox in ('mmpretrain', 'mmdet', 'mmseg'):
        package = os.path.dirname(find_spec(toolbox).origin)
        # No config of that name: every metafile is read, then ValueError.
        with contextlib.suppress(ValueError):
            utils._get_cfg_metainfo(package, '')


def serve(path: str) -> None:
    """Import :data:`PRELOAD`, then run each request in a fork (never
    returns; stop it with SIGTERM)."""
    import importlib

    for name in (*PRELOAD, 'dry_tools'):
        importlib.import_module(name)
    read_toolbox_indexes_once()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(path + '.tmp')
    server.listen()
    os.rename(path + '.tmp', path)  # the client waits for this name
    while True:
        connection, _ = server.accept()
        message, fds, _, _ = socket.recv_fds(connection, 1 << 20, STREAMS)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            server.close()
            run_tool(json.loads(message), fds)
        for fd in fds:
            os.close(fd)
        threading.Thread(
            target=report_status, args=(pid, connection), daemon=True
        ).start()


def report_status(pid: int, connection: socket.socket) -> None:
    _, status = os.waitpid(pid, 0)
    code = (
        os.WEXITSTATUS(status)
        if os.WIFEXITED(status)
        else 128 + os.WTERMSIG(status)
    )
    connection.send(str(code).encode())
    connection.close()


def run_tool(request: dict, fds) -> None:
    """In the fork: become ``python TOOL ARGS`` of the request."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.chdir(request['cwd'])
    os.environ.clear()
    os.environ.update(request['env'])
    sys.argv = request['argv']
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
    code = 0
    try:
        if sys.argv[0] == '-':
            script = compile(sys.stdin.read(), '<stdin>', 'exec')
            exec(script, dict(__name__='__main__'))
        elif os.environ.get(DRY_VARIABLE) == '1':
            code = sys.modules['dry_tools'].run(sys.argv)
        else:
            runpy.run_path(sys.argv[0], run_name='__main__')
    except SystemExit as stop:
        if isinstance(stop.code, int) or stop.code is None:
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(args) -> int:
    path = os.environ.get(SOCKET_VARIABLE)
    if args[:2] == ['-m', 'torch.distributed.run'] and os.environ.get(
        DRY_VARIABLE
    ):  # the tool command the launcher would start, dry
        args = next(
            args[i:] for i in range(len(args)) if is_tool_command(args[i:])
        )
    if path and is_tool_command(args):
        client = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        client.connect(path)
        request = dict(argv=args, cwd=os.getcwd(), env=dict(os.environ))
        socket.send_fds(
            client, [json.dumps(request).encode()], list(range(STREAMS))
        )
        return int(client.recv(16))
    os.execv(sys.executable, [sys.executable, *args])


if __name__ == '__main__':
    if sys.argv[1:2] == ['--serve']:
        serve(sys.argv[2])
    sys.exit(main(sys.argv[1:]))
