from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent


def read_requirements(name):
    lines = (HERE / 'requirements' / name).read_text().splitlines()
    return [line.strip() for line in lines
            if line.strip() and not line.startswith('#')]


version = {}
exec((HERE / 'hetdpt_mm' / 'version.py').read_text(), version)

setup(
    name='hetdpt_mm',
    version=version['__version__'],
    description='Heterogeneity-aware depth pruning (HetDPT) of Vision '
    'Transformers for OpenMMLab: classification, DETR and UperNet.',
    long_description=(HERE / 'README.md').read_text(),
    long_description_content_type='text/markdown',
    python_requires='>=3.9',
    packages=find_packages(include=['hetdpt_mm', 'hetdpt_mm.*']),
    # torch, torchvision and mmcv (with ops) are deliberately not listed:
    # tools/install_deps.sh installs them so that an existing CUDA torch is
    # kept and mmcv is never built by pip in an isolated environment.
    install_requires=read_requirements('runtime.txt'),
    # deploy: ONNX export and the ONNX Runtime / OpenVINO runtimes;
    # width: Torch-Pruning, for width pruning (HetDPT+); vis: TensorBoard;
    # docs: Sphinx and myst-parser, for the docs site.
    extras_require={'tests': read_requirements('tests.txt'),
                    'deploy': read_requirements('deploy.txt'),
                    'width': read_requirements('width.txt'),
                    'vis': read_requirements('vis.txt'),
                    'docs': read_requirements('docs.txt')},
    license='Apache-2.0',
)
