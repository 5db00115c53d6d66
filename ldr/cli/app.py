"""The `ldr` command group: error handling (no traceback reaches a user) and logging."""
from __future__ import annotations

import logging
import sys

import click

from ..errors import LdrError

class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that a build cleans up the same way."""


def _on_sigterm(signum, frame):
    raise _Terminated()


def _on_sigint(signum, frame):
    """The first Ctrl-C unwinds (a build cancels its encoding and cleans up, within a model call);
    a second one stops the process at once: the index's last commit is untouched either way, and
    exiting under running native threads printed `terminate called ...` / `Aborted`."""
    import os
    import signal

    def again(signum, frame):
        sys.stderr.write("interrupted again: stopped at once (the index's last commit is intact)\n")
        sys.stderr.flush()
        os._exit(130)
    signal.signal(signal.SIGINT, again)
    raise KeyboardInterrupt()


class _Group(click.Group):
    """Turns every error into `error: ...` on stderr and an exit code, never a traceback:
    LdrError and OS errors (disk full, permissions) exit 2, anything unexpected 1 (its traceback
    with -vv), Ctrl-C 130 and SIGTERM 143, after the same cleanup."""

    def format_commands(self, ctx, formatter):
        """Each command with its first sentence whole (click cuts it at the terminal's width)."""
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                text = " ".join((cmd.help or "").split())
                rows.append((name, cmd.short_help or text.split(". ")[0].rstrip(".") + "."))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def parse_args(self, ctx, args):
        """-v works after the subcommand and -q before it, as users put them (`ldr index ... -v`,
        `ldr -q index ...`): -v is the group's, -q each command's."""
        return super().parse_args(ctx, _place_flags(self, list(args)))

    def invoke(self, ctx):
        import errno
        import signal

        try:
            signal.signal(signal.SIGTERM, _on_sigterm)
            signal.signal(signal.SIGINT, _on_sigint)
        except ValueError:  # not the main thread (embedded use): leave signals alone
            pass
        try:
            return super().invoke(ctx)
        except LdrError as e:
            click.echo(f"error: {e}", err=True)
            ctx.exit(2)
        except _Terminated:
            click.echo("terminated", err=True)
            ctx.exit(143)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except BrokenPipeError:
            # the reader stopped (`ldr info IDX | head`): stop quietly, as other command-line tools do
            import os
            import sys
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(141)
        except OSError as e:
            if e.errno == errno.ENOSPC:
                click.echo("error: no space left on device", err=True)
            else:
                where = f": {e.filename}" if e.filename else ""
                click.echo(f"error: {e.strerror or e}{where}", err=True)
            ctx.exit(2)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except BaseException as e:
            panic = type(e).__name__ == "PanicException"    # a Rust library (tantivy) failed: BaseException
            if not panic and not isinstance(e, Exception):
                raise
            if panic:
                first = str(e).splitlines()[0][:200] if str(e) else "panic"
                click.echo(f"error: a component of the index failed ({first}); its files are probably damaged: "
                           "run `ldr check INDEX`", err=True)
                ctx.exit(2)
            logging.getLogger("ldr").debug("unexpected error", exc_info=True)   # a bug: the traceback is for -vv
            click.echo(f"error: unexpected {type(e).__name__}: {str(e)[:500]} "
                       "(run with -vv for details; please report it)", err=True)
            ctx.exit(1)


_VERBOSE = {"-v", "-vv", "-vvv", "--verbose"}
_QUIET = {"-q", "--quiet"}


class _AboveTheBar(logging.Handler):
    """Log lines go above a live progress bar (tqdm.write clears and redraws it), never glued onto it."""

    def emit(self, record):
        try:
            from tqdm import tqdm
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:
            self.handleError(record)


class _Lines(logging.Formatter):
    """`warning: ...` as a CLI says it. A logged exception is its one-line summary, not its
    traceback (a library's own, e.g. Ray Serve's router on a killed replica: "Task exception was
    never retrieved"), unless -vv asks for the details."""

    def format(self, record):
        if record.exc_info and record.exc_info[1] is not None and logging.getLogger().level > logging.DEBUG:
            e = record.exc_info[1]
            first = (str(e).strip().splitlines() or [""])[0][:300]
            record = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None,
                                            "msg": f"{record.getMessage()} ({type(e).__name__}{': ' if first else ''}{first})",
                                            "args": None})
        return super().format(record).replace(record.levelname, record.levelname.lower(), 1)


def _place_flags(group: click.Group, args: list[str]) -> list[str]:
    at = next((i for i, a in enumerate(args) if not a.startswith("-")), None)
    if at is None or args[at] not in group.commands:
        return args
    before, name, after = args[:at], args[at], args[at + 1:]
    end = after.index("--") if "--" in after else len(after)
    verbose = [a for a in after[:end] if a in _VERBOSE]
    after = [a for a in after[:end] if a not in _VERBOSE] + after[end:]
    quiet = [a for a in before if a in _QUIET]
    takes_quiet = any(p.name == "quiet" for p in group.commands[name].params)
    if quiet and takes_quiet:
        before = [a for a in before if a not in _QUIET]
        after = quiet[:1] + after
    return verbose + before + [name] + after


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ldr")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def main(verbose: int) -> None:
    """ldr: long-document retrieval engine."""
    from .plugins import load_plugins

    level = logging.WARNING - 10 * min(verbose, 2)
    handler = _AboveTheBar()
    handler.setFormatter(_Lines("%(levelname)s %(name)s: %(message)s" if verbose else "%(levelname)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    load_plugins()      # LDR_PLUGINS / `ldr.plugins` entry points: extra kinds and stages

