"""The ``headwater`` command's shape, without a master: every operation is a command, every argument has help,
``--version`` and ``--help`` answer, a wrong command exits 2."""

from __future__ import annotations

import subprocess
import sys

from headwater.cli import EXIT_CODES, build_parser
from headwater.cli.operations import ARGUMENT_HELP, COMMANDS, NOT_COMMANDS, command_of
from headwater.errors import HTTP_STATUS
from headwater.runtime.operations import OPERATIONS
from tests.support.service import ENV, ROOT


def headwater(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "headwater", *args], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=120)


def test_every_operation_is_a_command_with_help_for_each_argument():
    parser = build_parser()
    for name, op in OPERATIONS.items():
        if name in NOT_COMMANDS:
            continue
        words = command_of(name)
        hints = op.hints
        args = [*words, *("x" for p in list(op.signature.parameters.values())[1:]
                          if p.default is p.empty and p.name != "password" and hints[p.name] is not bool)]
        assert parser.parse_args(args).operation == name
        for param in list(op.signature.parameters.values())[1:]:
            assert ARGUMENT_HELP.get(param.name), f"{name}.{param.name} has no help"
    assert set(COMMANDS.values()) <= set(OPERATIONS)  # no command names an operation that is gone


def test_exit_codes_cover_the_statuses_a_script_meets():
    assert set(EXIT_CODES) <= set(HTTP_STATUS.values()) | {401}
    assert len(set(EXIT_CODES.values())) == len(EXIT_CODES) and 0 not in EXIT_CODES.values()


def test_version_and_help_answer_and_a_wrong_command_exits_2():
    version = headwater("--version")
    assert version.returncode == 0 and version.stdout.startswith("headwater ")
    help_ = headwater("graph", "stop", "--help")
    assert help_.returncode == 0 and "--json" in help_.stdout and "GRAPH" in help_.stdout
    wrong = headwater("graph", "explode")
    assert wrong.returncode == 2 and "invalid choice" in wrong.stderr


def test_every_option_of_every_command_has_help():
    import argparse

    def walk(parser: argparse.ArgumentParser, words: tuple[str, ...]):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    yield from walk(child, (*words, name))
            elif not isinstance(action, argparse._HelpAction | argparse._VersionAction):
                yield words, action

    missing = [f"{' '.join(w)} {a.option_strings or a.dest}" for w, a in walk(build_parser(), ()) if not a.help]
    assert not missing, f"options without help: {missing}"


def test_a_command_against_a_master_loads_no_database_driver():
    # a command only talks HTTP: SQLAlchemy (~0.2 s of every call's start) is the master's, not the client's
    code = ("import sys; from headwater.cli import main; from headwater.cli import operations; "
            "print(sorted(m for m in ('sqlalchemy', 'psycopg', 'pyspark') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_standby_first_looks_for_the_lease_one_lease_after_it_starts():
    """Started beside the active master, a standby that tried at once would win the lease as often as not."""
    from headwater.service.run import LEADERSHIP_POLL_S, _await_leadership

    class Leadership:
        tries = 0

        def try_acquire(self) -> bool:
            self.tries += 1
            return False

    class Stop:
        def __init__(self) -> None:
            self.waits: list[float] = []

        def wait(self, seconds: float) -> bool:
            self.waits.append(seconds)
            return len(self.waits) > 3  # stopped at the fourth wait

    leadership, stop = Leadership(), Stop()
    _await_leadership(leadership, None, None, stop, first_wait=7.5)  # type: ignore[arg-type]
    assert stop.waits == [7.5, LEADERSHIP_POLL_S, LEADERSHIP_POLL_S, LEADERSHIP_POLL_S] and leadership.tries == 3
