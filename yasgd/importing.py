"""What a Ctrl-C does while an entry module's imports run (``yasgd.cli``, ``yasgd.launch``):
no command has started, no handler of yasgd's is in and nothing is there to keep, so it ends
the process at once with the line a Ctrl-C gets later on (``yasgd: interrupted``, exit status
130), not a KeyboardInterrupt traceback through the imports. This module imports nothing of
its own, so that it is in place before the slow imports.

SIGTERM keeps its default action there: a rank still starting ends without a word, which is
what ``yasgd launch`` relies on (a rank that does not yet catch SIGTERM gets SIGTERM).
"""
import os
import signal


def _interrupted(signum, frame):
    os.write(2, b"yasgd: interrupted\n")
    os._exit(128 + signum)


class ctrl_c_ends_imports:
    """``with ctrl_c_ends_imports(): import ...``: a Ctrl-C inside ends the process as above.
    SIGINT is taken only from Python's own handler (not where it is ignored, as under nohup,
    nor outside the main thread), and given back to it on the way out."""

    def __enter__(self):
        self.taken = False
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            try:
                signal.signal(signal.SIGINT, _interrupted)
                self.taken = True
            except ValueError:          # not the main thread: signals are not ours to take
                pass
        return self

    def __exit__(self, *exc):
        if self.taken:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        return False
