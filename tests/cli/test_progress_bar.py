"""The progress bar of long commands: redrawn on a terminal, one line in a file."""

from __future__ import annotations

import io

from culex.cli.progress_bar import ProgressBar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_sees_the_bar_redrawn_and_a_file_one_line() -> None:
    terminal, file = Terminal(), io.StringIO()
    for stream in (terminal, file):
        bar = ProgressBar("retrying", stream, width=10)
        for done in (500, 1000, 1200):
            bar(done, 1200)
    assert terminal.getvalue() == (
        "\rretrying [####......] 500/1,200 (42%)"
        "\rretrying [########..] 1,000/1,200 (83%)"
        "\rretrying [##########] 1,200/1,200 (100%)\n"
    )
    assert file.getvalue() == "retrying [##########] 1,200/1,200 (100%)\n"


def test_nothing_to_do_is_a_full_bar() -> None:
    file = io.StringIO()
    ProgressBar("deleting", file, width=4)(0, 0)
    assert file.getvalue() == "deleting [####] 0/0 (100%)\n"
