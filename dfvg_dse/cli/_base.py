"""The command line's root group and shared helpers: thin commands that parse options, call one library function, format.

Every user mistake (bad data file, unknown name, bad option value) ends as one line on stderr
and exit code 2. With --json, stdout holds one JSON document and nothing else.
"""

from __future__ import annotations

import importlib
import json
import math
import re
import shutil
import sys
import time

import click

from dfvg_dse import __version__
from dfvg_dse.catalog import Catalog, CatalogError
from dfvg_dse.catalog.lookup import DEFAULT_ENGINE
from dfvg_dse.report.tables import json_safe
from dfvg_dse.specs import InputError


class UserError(click.ClickException):
    """A mistake in the user's input: one line, exit code 2."""

    exit_code = 2


class Interrupted(click.ClickException):
    """Ctrl-C: one line, the shell's exit code for SIGINT."""

    exit_code = 130


def _stop_children() -> None:
    """Terminate and wait for every process this one started through multiprocessing and still
    runs, so the Ctrl-C line is true when printed. The stage runtimes stop their own on the way
    out; this catches one the interrupt reached between two of their steps. Children ignore SIGINT
    (processes.py), so SIGTERM, then SIGKILL."""
    multiprocessing = sys.modules.get("multiprocessing")
    if multiprocessing is None:  # never imported: nothing was started
        return
    from dfvg_dse.processes import interrupts_deferred  # imported only once processes exist

    try:
        with interrupts_deferred():  # a second Ctrl-C waits until they are gone, then is the same one
            for process in multiprocessing.active_children():
                process.terminate()
                process.join(timeout=2.0)
                if process.is_alive():
                    process.kill()
                    process.join()
    except KeyboardInterrupt:
        pass


# Lists where an empty value is a meaningful choice ("no static trees, only the dynamic rules").
EMPTY_MEANS_NONE = {"trees", "dynamic_rules"}


def _refuse_undecodable(ctx: click.Context, param: click.Parameter) -> None:
    """A text value (not a path) with bytes that are not UTF-8 is refused, naming the option: it would
    be written into a file (a source, a name) that must stay UTF-8. Paths may hold any bytes."""
    if isinstance(param.type, click.Path) or ctx.get_parameter_source(param.name) is not \
            click.core.ParameterSource.COMMANDLINE:
        return
    value = ctx.params.get(param.name)
    for text in value if isinstance(value, tuple) else (value,):
        if isinstance(text, str) and any("\ud800" <= c <= "\udfff" for c in text):
            raise click.BadParameter(f"{text.encode('utf-8', 'surrogateescape')!r} is not UTF-8 text",
                                     ctx=ctx, param=param)


def _refuse_empty(command: click.Command, ctx: click.Context, args: list[str]) -> None:
    """An option or argument given as "" is a usage error, never its default; NUL bytes are refused."""
    if any("\x00" in arg for arg in args):  # no file name or value holds one (the OS would refuse it)
        raise click.UsageError("an argument holds a NUL character", ctx=ctx)
    for param in command.params:
        _refuse_undecodable(ctx, param)
        if (ctx.params.get(param.name) == "" and param.name not in EMPTY_MEANS_NONE
                and ctx.get_parameter_source(param.name) is click.core.ParameterSource.COMMANDLINE):
            hint = "; leave the option out for its default" if isinstance(param, click.Option) else ""
            raise click.BadParameter(f"empty value{hint}", ctx=ctx, param=param)


class _RefusesEmpty:
    """Mixin of every command and group: after click parses, empty values are refused (_refuse_empty)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        rest = super().parse_args(ctx, args)
        _refuse_empty(self, ctx, args)
        return rest


class _Command(_RefusesEmpty, click.Command):
    """A command: empty values refused."""


def _short(text: str, limit: int) -> str:
    """A command's one-line help shortened exactly as click shortens a loaded command's."""
    return click.Command("lazy", help=text).get_short_help_str(limit)


class _Group(_RefusesEmpty, click.Group):
    """Root group: library errors become UserError, and every usage error prints one line, exit 2.
    Its subgroups are of this class too, and their commands are _Command.

    The root loads a command's module only when that command runs (lazy_commands: name -> module
    and short help, set in cli/__init__.py), so `--help` or `cost` never pays for optuna, pandas or scipy.stats."""

    command_class = _Command
    group_class = type
    lazy_commands: dict[str, tuple[str, str]] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(self.lazy_commands))

    def get_command(self, ctx: click.Context, name: str):
        if name not in self.commands and name in self.lazy_commands:
            importlib.import_module(f"dfvg_dse.cli.{self.lazy_commands[name][0]}")  # registers its commands
        return self.commands.get(name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names), default=0)
        rows = [(name, self.commands[name].get_short_help_str(limit) if name in self.commands
                 else _short(self.lazy_commands[name][1], limit)) for name in names]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (CatalogError, InputError) as err:
            raise UserError(str(err)) from None
        except OSError as err:
            if err.filename is None:  # not about a path the user gave: a real failure, shown as such
                raise
            raise UserError(f"{err.filename}: {err.strerror or err}") from None
        except KeyboardInterrupt:  # caught before click's own handler, which prints a blank line first
            _stop_children()
            raise Interrupted("interrupted (Ctrl-C); nothing was left running") from None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            try:
                code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            finally:
                ProgressLine.clear_shown()  # an error, or a command that did not close its line
        except click.UsageError as err:
            where = err.ctx.command_path if err.ctx else "dfvg-dse"
            click.echo(f"Error: {one_line(err.format_message())} (see '{where} --help')", err=True)
            code = 2
        except click.ClickException as err:
            click.echo(f"Error: {one_line(err.format_message())}", err=True)
            code = err.exit_code
        except click.Abort:
            click.echo("Aborted!", err=True)
            code = 1
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)


LONG_WORD = re.compile(r"\S{161,}")  # no real name or path is this long: an echoed value gone wrong


def one_line(message: str) -> str:
    """An error as one readable line: control characters escaped, any run of 161+ non-blank characters
    cut to 160 (paths and names of ordinary length stay whole)."""
    printable = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
    return LONG_WORD.sub(lambda m: m[0][:157] + "...", printable)


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that also refuses nan, inf and -inf: its range checks let nan through (every
    comparison with nan is false), and a range open above lets inf through. Every float option uses it."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


MIN_TEMPERATURE = 1e-5  # vLLM samples greedily below this (_SAMPLING_EPS); far below it, logits / T overflow


class Temperature(FiniteFloatRange):
    """A sampling or Gumbel temperature: 0 (greedy, or plain top-k) or a finite T >= MIN_TEMPERATURE."""

    def __init__(self) -> None:
        super().__init__(0)

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if 0 < number < MIN_TEMPERATURE:
            self.fail(f"{value!r}: use 0 or at least {MIN_TEMPERATURE:g} (smaller temperatures overflow)", param, ctx)
        return number


# numpy's legacy seeding (optuna's samplers) takes 0..2**32 - 1 and SeedSequence refuses negatives:
# every --seed is this range, so a bad seed is one line naming --seed, never a traceback mid-run.
MAX_SEED = 2**32 - 1
SEED = click.IntRange(0, MAX_SEED)

MAX_VALUE = 10**9  # tokens, context or batch beyond this is a typo, not a design
MAX_POINTS = 100_000  # (n, c, b) combinations per `cost` call; one row is printed per point


def parse_int_list(text: str, name: str, minimum: int) -> list[int]:
    """'4', '1,2,4', '1-64' (step 1), '0-8192:1024' (step) or '1-512:x2' (doubling) -> integers."""
    values: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+)(?::(x?)(\d+))?)?", part.strip())
        if not match:
            raise InputError(f"{name} {text!r}: expected integers like 4, 1,2,4, 1-64, 0-8192:1024 or 1-512:x2")
        start, stop, mult, step = match.groups()
        first, last, stride = int(start), int(stop or start), int(step or 1)
        if max(first, last) > MAX_VALUE:
            raise InputError(f"{name} {part.strip()!r}: values must be <= {MAX_VALUE:.0e}")
        if last < first or stride < 1 or (mult and (stride < 2 or first < 1)):
            raise InputError(f"{name} {part.strip()!r}: a range needs start <= stop and a step >= 1 "
                             "(x2 or more, from 1 up, to multiply)")
        if not mult and (last - first) // stride >= MAX_POINTS:
            raise InputError(f"{name} {part.strip()!r}: more than {MAX_POINTS:,} values")
        value = first
        while value <= last:
            values.append(value)
            value = value * stride if mult else value + stride
    if any(v < minimum for v in values):
        raise InputError(f"{name} {text!r}: every value must be >= {minimum}")
    return values


def given_options(ctx: click.Context, names: list[str]) -> list[str]:
    """The options among `names` (parameter names) that the user set on the command line, as spelled there."""
    by_name = {param.name: param for param in ctx.command.params}
    return [by_name[name].opts[0] for name in names
            if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE]


def refuse_unused(ctx: click.Context, names: list[str], why: str) -> None:
    """One line naming every option in `names` that was given although `why` makes it unused (never ignored)."""
    unused = given_options(ctx, names)
    if unused:
        raise InputError(f"{', '.join(unused)}: not used {why}; leave {'it' if len(unused) == 1 else 'them'} out")


def refuse_other_rules(ctx: click.Context, table: dict[str, tuple[str, ...]], chosen: str, label: str) -> None:
    """`table` maps each way of drafting to the parameters it reads; any parameter that only another way
    reads, given on the command line, is refused (never silently ignored)."""
    used = table[chosen]
    others = [name for names in table.values() for name in names if name not in used]
    refuse_unused(ctx, list(dict.fromkeys(others)), f"with {label}")


def emit_json(document) -> None:
    click.echo(json.dumps(json_safe(document), indent=2, allow_nan=False))


def emit_json_list(items) -> None:
    """A JSON list written item by item (the same text as emit_json of the whole list), so a long
    iterator of records never sits in memory at once."""
    first = True
    for item in items:
        text = json.dumps(json_safe(item), indent=2, allow_nan=False).replace("\n", "\n  ")
        click.echo(("[\n  " if first else ",\n  ") + text, nl=False)
        first = False
    click.echo("[]" if first else "\n]")


MAX_WARNINGS_SHOWN = 5  # a sweep over many points warns once per kind of problem, not once per point


def emit_warnings(warnings) -> None:
    """Warnings on stderr, one line each, the first MAX_WARNINGS_SHOWN distinct ones (--json keeps all)."""
    distinct = list(dict.fromkeys(warnings))
    if distinct:
        ProgressLine.clear_shown()  # a warning in the middle of long work starts its own line
    for warning in distinct[:MAX_WARNINGS_SHOWN]:
        click.echo(f"warning: {warning}", err=True)
    if len(distinct) > MAX_WARNINGS_SHOWN:
        click.echo(f"warning: ... and {len(distinct) - MAX_WARNINGS_SHOWN:,} more like these (--json lists "
                   "every warning with its point)", err=True)


def issue_marks(issues) -> str:
    """The issues of one fit, appended to the source of every value it wrote."""
    return "".join(f"; {'SUSPECT' if i.suspect else 'WARNING'}: {i.message}" for i in issues)


def emit_issues(issues) -> None:
    """Fit issues (validation/calibrate.FitIssue) in text mode: suspect fits first, one line each, then
    the warnings (stderr)."""
    for issue in issues:
        if issue.suspect:
            click.echo(f"suspect: {issue.message}", err=True)
    emit_warnings(i.message for i in issues if not i.suspect)


class ProgressLine:
    """Progress of long work on one line of stderr, rewritten in place ("validate: 5/17 prompt 1/8
    chain:4 overlap [12 s]"), and cleared when the work ends. Silent unless enabled (not --json)
    and the stream is a terminal: pipes, logs and CliRunner see nothing. An instance is the
    library's `progress(done, total, step)` callback; use it as a context manager around the call
    (an error message clears a line still shown first, see _Group.main)."""

    shown: "ProgressLine | None" = None  # the line on screen now, if any

    def __init__(self, label: str, enabled: bool = True, stream=None):
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(enabled and callable(isatty) and isatty())
        self.started = time.monotonic()
        self.width = 0  # of the line on screen, to blank it

    def __call__(self, done: int, total: int, step: str = "") -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.started
        text = f"{self.label}: {done}/{total} {step} [{elapsed:.0f} s]".replace("  ", " ")
        text = text[:max(20, shutil.get_terminal_size((80, 24)).columns - 1)]  # one screen line, or \r cannot rewrite it
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = len(text)
        ProgressLine.shown = self

    def close(self) -> None:
        if self.enabled and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0
        if ProgressLine.shown is self:
            ProgressLine.shown = None

    @classmethod
    def clear_shown(cls) -> None:
        """Blank the line on screen, if any: before an error message, so it starts its own line."""
        if cls.shown is not None:
            cls.shown.close()

    def __enter__(self) -> "ProgressLine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress_line(label: str, as_json: bool) -> ProgressLine:
    """The progress callback of a long command: on a terminal's stderr, never with --json."""
    return ProgressLine(label, enabled=not as_json)


def emit_table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip())


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--models-dir", help="Model directories searched before your data dir and the shipped models/ "
                                   "(':'-separated) [else env DFVG_DSE_MODELS_DIR].")
@click.option("--hwdb-dir", help="Hardware directories searched before your data dir and the shipped hwdb/ "
                                 "(':'-separated) [else env DFVG_DSE_HWDB_DIR].")
@click.version_option(__version__, prog_name="dfvg-dse")
@click.pass_context
def cli(ctx: click.Context, models_dir: str | None, hwdb_dir: str | None) -> None:
    """Analytical design-space explorer for heterogeneous speculative decoding."""
    ctx.obj = {"models_dir": models_dir, "hwdb_dir": hwdb_dir}


def catalog_of(ctx: click.Context) -> Catalog:
    """The catalog of the root options; GPUs priced by the command's --engine (engine_option)."""
    catalog = Catalog.open(ctx.obj["models_dir"], ctx.obj["hwdb_dir"])
    engine = ctx.obj.get("engine")
    return catalog if engine is None else catalog.with_engine(engine)


def _remember_engine(ctx: click.Context, param: click.Parameter, value: str) -> str:
    ctx.obj["engine"] = value
    return value


def engine_option(command):
    """--engine NAME on a command that prices forwards: the profile catalog_of applies to GPUs."""
    return click.option("--engine", default=DEFAULT_ENGINE, show_default=True, callback=_remember_engine,
                        expose_value=False, metavar="NAME",
                        help="Serving engine whose fitted profile prices GPU forwards (`dfvg-dse engines list`; "
                             "roofline: the plain roofline).")(command)




def parallel_options(role: str, device_option: str):
    """--ROLE-tp N, --ROLE-pp N and --ROLE-ep N (--tp, --pp, --ep without a role): the GPU of
    `device_option` as a group of N x M GPUs, tensor x pipeline parallel, a mixture of experts' experts
    spread over the N (docs/cost-model.md, "Parallel stages"); a group name such as 4xh100-sxm says the same."""
    prefix = f"--{role}-" if role else "--"

    def wrap(command):
        for kind, words in (("ep", "expert"), ("pp", "pipeline"), ("tp", "tensor")):
            command = click.option(f"{prefix}{kind}", f"{role or 'device'}_{kind}", type=click.IntRange(1, 64),
                                   default=1, show_default=True,
                                   help=f"{words.capitalize()}-parallel degree of {device_option} (or name a group: "
                                        f"4xh100-sxm).")(command)
        return command
    return wrap
