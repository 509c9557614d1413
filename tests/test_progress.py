"""The progress bar piped (a log file, CI): its last line is printed once, not twice."""

from __future__ import annotations

import io

from kb_eval.progress import ProgressBar


def _lines(stream: io.StringIO) -> list[str]:
    return [ln for ln in stream.getvalue().replace("\r", "\n").splitlines() if ln.strip()]


def test_piped_bar_prints_its_last_line_once():
    out = io.StringIO()  # not a terminal
    bar = ProgressBar(total=2, unit="sample", file=out, mininterval=0, miniters=1)
    for i in range(2):
        bar.set_postfix_str(f"correct {i + 1}", refresh=False)
        bar.update()
    bar.close()
    lines = _lines(out)
    assert sum("2/2" in ln for ln in lines) == 1, lines
    assert "correct 2" in lines[-1] and out.getvalue().endswith("\n")


def test_piped_bar_shows_a_change_made_after_its_last_line():
    """close() still prints when it has something new to show (a postfix set quietly)."""
    out = io.StringIO()
    bar = ProgressBar(total=1, file=out, mininterval=0, miniters=1)
    bar.update()
    bar.set_postfix_str("late news", refresh=False)
    bar.close()
    assert "late news" in _lines(out)[-1]
