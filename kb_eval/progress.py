"""The progress bar of `run` and `eval`: tqdm on stderr, except that piped (a log file,
CI) it does not print its last line twice on close()."""

from __future__ import annotations

from tqdm import tqdm


class ProgressBar(tqdm):
    def display(self, msg=None, pos=None):
        state = (self.n, self.total, self.postfix)
        # close() sets `disable` before its final display: skip it if it shows nothing new
        closing = self.disable and msg is None
        if closing and not _is_tty(self.fp) and state == getattr(self, "_shown", None):
            return True
        if msg is None:
            self._shown = state
        return super().display(msg, pos)


def _is_tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def progress_bar(total: int, quiet: bool = False) -> ProgressBar:
    """A bar of `total` samples; `quiet` shows none."""
    return ProgressBar(total=total, unit="sample", dynamic_ncols=True, disable=quiet)
