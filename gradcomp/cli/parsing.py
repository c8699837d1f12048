"""The command line's parser and how a command ends, importing nothing of the library (so
that `gradcomp --version` and `--help` start quickly): one-line usage errors with the nearest
name suggested, and the library's errors as messages."""
import argparse
import difflib
import os
import re
import sys


def nearest(word: str, choices) -> str:
    """" (did you mean X?)" for the choice closest to `word`, or "" when none is close."""
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {match[0]}?)" if match else ""


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, `gradcomp COMMAND: error: ...`, exit 2,
    with the nearest option or command suggested for a misspelt one."""

    def __init__(self, *args, **kwargs):
        self.option_names: list[str] = []
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs):
        action = super().add_argument(*args, **kwargs)
        self.option_names.extend(action.option_strings)
        return action

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but unknown options are reported by the command they were given
        to, each with the nearest of its options."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(parsed, "parser", self)
            command.error("unrecognized arguments: " + " ".join(
                extra + (nearest(extra.split("=")[0], command.option_names)
                         if extra.startswith("-") else "") for extra in extras))
        return parsed

    def error(self, message):
        message = " ".join(str(message).split())
        wrong = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if wrong:
            message += nearest(wrong.group(1), re.findall(r"'([^']*)'", wrong.group(2)))
        self.exit(2, f"{self.prog}: error: {message}\n")


INTERRUPTED, BROKEN_PIPE = 130, 141  # exit statuses as a shell reports SIGINT and SIGPIPE


def dispatch(args) -> int:
    """Run the chosen command (`args.parser` its parser). Bad input found by the library (a
    ValueError naming the option) and a file that cannot be opened become one line on stderr
    and exit status 2, no traceback; Ctrl-C and a closed pipe end quietly."""
    try:
        args.run(args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except ValueError as exc:
        args.parser.error(str(exc))
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)  # nothing left to flush at exit
        try:
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):  # stdout without a file descriptor (in-process)
            pass
        return BROKEN_PIPE
    except OSError as exc:  # a full disk, a folder that cannot be written, a missing file
        where = f"{exc.filename}: " if exc.filename is not None else ""
        args.parser.error(f"{where}{exc.strerror or exc}")
    except KeyboardInterrupt:
        print(f"{args.parser.prog}: interrupted (rows already measured are kept; run the same "
              "command again to resume)", file=sys.stderr)
        return INTERRUPTED
    return 0
