"""yasgd: Yet Another Accelerated SGD (Fujitsu 2019) and LARS on MXNet Gluon + Horovod.

The pinned stack is installed by ``make install`` (jobs/install.sh); Horovod
must be built against the installed MXNet with ``--no-build-isolation``, which
is why it is not an install_requires here.
"""
from setuptools import find_packages, setup

setup(
    name="yasgd",
    version="0.1.0",
    description="Large-batch ImageNet training (YASGD + LARS) on MXNet Gluon and Horovod",
    long_description=open("README.md").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    packages=find_packages(include=["yasgd", "yasgd.*"]),
    package_data={"yasgd.ops": ["*.cc"], "yasgd": ["mxnet_cuda_wheels.json"]},
    python_requires=">=3.8,<3.12",
    install_requires=[
        "numpy==1.23.5",
        "pyyaml==6.0.2",
        "mpi4py==4.1.2",
        "gluoncv==0.10.5.post0",
        "mlperf-logging==4.1.68",
        "tqdm==4.67.1",
        # mxnet (CPU: mxnet==1.9.1, GPU: e.g. mxnet-cu110==1.9.1) and
        # horovod==0.28.1 are installed by jobs/install.sh.
    ],
    entry_points={"console_scripts": ["yasgd=yasgd.cli:main"]},
)
