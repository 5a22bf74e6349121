"""Run ``python tools/NAME.py ...`` without paying for the imports each time.

The docs' command blocks call the tools dozens of times, and importing the
package with the three toolboxes takes longer than most of those commands
run.  ``serve(path)`` imports them once and listens on a Unix socket; run as
a script, this file is a ``python`` that hands a ``tools/*.py`` command to
that server, which forks and runs the tool as ``__main__`` in the caller's
directory, environment, arguments and standard streams (passed over the
socket) and returns its exit status.  Any other command, or no server, runs
the real interpreter.  A forked child starts from freshly imported modules,
so the tool sees what a new interpreter gives it.
"""

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


def is_tool_command(args) -> bool:
    return (
        bool(args) and args[0].startswith('tools/') and args[0].endswith('.py')
    )


def serve(path: str) -> None:
    """Import :data:`PRELOAD`, then run each request in a fork (never
    returns; stop it with SIGTERM)."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
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
