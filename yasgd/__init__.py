"""yasgd: a reproduction of Fujitsu's "Yet Another Accelerated SGD" (Yamazaki et al.,
arXiv 1903.12650, 2019) and of LARS (You, Gitman, Ginsburg, arXiv 1708.03888) on
MXNet Gluon + Horovod."""
import warnings as _warnings

# mxnet 1.9.1 on numpy 1.23 emits DeprecationWarnings (np.bool, distutils) at import.
_warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"mxnet(\.|$)")
_warnings.filterwarnings("ignore", category=DeprecationWarning, message=r".*distutils.*")

__version__ = "0.1.0"


class UsageError(Exception):
    """Bad input from the user: reported as one line, exit status 2, before any work."""
