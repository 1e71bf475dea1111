"""The READMEs' and the docs' backticked file paths, dclr module names, `dclr` command options,
`--set` / `--grid` option keys and the options of the repository's own scripts still name real
things.

A file moved (tests split into folders, a module folded into another) leaves every sentence that
named it pointing at nothing; these tests fail on the first such sentence. Pure file reading plus
imports. Left out: docs/code-health.md, a dated log whose entries name files as they were then, and
docs/reproduction-log.md, whose `path:LINE` references have their own, stricter test. A path that
only git's history keeps is allowed where its own line says so ("git history").
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import pkgutil
import re
import shlex

import pytest
import typer
from helpers import REPO_ROOT

from dclr.cli.main import app
from dclr.methods.registry import section_classes
from dclr.options.config import CORE_SECTIONS
from dclr.options.flat import flat_name

DATED_OR_CHECKED_ELSEWHERE = frozenset({"code-health.md", "reproduction-log.md"})
DOCS = [
    path
    for path in [
        REPO_ROOT / "README.md",
        REPO_ROOT / "benchmarks" / "README.md",
        REPO_ROOT / "lab" / "README.md",
        *sorted((REPO_ROOT / "docs").glob("*.md")),
    ]
    if path.name not in DATED_OR_CHECKED_ELSEWHERE
]
TOP_FOLDERS = ("src", "tests", "benchmarks", "scripts", "recipes", "lab", "docs", ".ci")
PATH = re.compile(rf"`((?:{'|'.join(re.escape(f) for f in TOP_FOLDERS)})/[^`\s]*)`")
PATTERN_CHARS = set("*{}<>…$[]")  # a glob, a placeholder or a shell variable: not one file
# `dclr.module.name` or `dclr.module:NAME`, closed by a backtick or a call's parenthesis
MODULE_NAME = re.compile(r"`(dclr(?:_lab)?(?:\.[A-Za-z_]\w*)+)(?::([A-Za-z_]\w*))?[`(]")
HISTORY_ONLY = "git history"


def mentions(pattern: re.Pattern[str]) -> list[tuple[str, str, re.Match[str]]]:
    """(`doc:line`, the line, the match) for every match in every doc."""
    found = []
    for doc in DOCS:
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for match in pattern.finditer(line):
                found.append((f"{doc.relative_to(REPO_ROOT)}:{number}", line, match))
    return found


def file_part(mention: str) -> str | None:
    """The repository path a backticked mention names, or None for a pattern."""
    path = mention.split("::")[0].split("#")[0].rstrip(".,:;)")
    return None if PATTERN_CHARS & set(path) else path


PATHS = [(where, line, file_part(m.group(1))) for where, line, m in mentions(PATH)]
PATHS = [(where, line, path) for where, line, path in PATHS if path]


def is_package_module(name: str) -> bool:
    """True when the name's second part is a module or package of dclr / dclr_lab.

    `dclr.noise_gradient` is a config key (section `dclr`, key `noise_gradient`), not a module:
    only names that start with a real module are import paths.
    """
    top, second = name.split(".")[:2]
    return importlib.util.find_spec(f"{top}.{second}") is not None


MODULES = [
    (where, m.group(1), m.group(2))
    for where, _, m in mentions(MODULE_NAME)
    if is_package_module(m.group(1))
]


# `dclr SUBCOMMAND ...` (also after `python -m` / `torchrun ... -m`) up to a backtick, pipe, `;`,
# `&` or redirection: the command line a reader would type
COMMAND_LINE = re.compile(
    r"(?:^|[\s`(])(?:python3? -m |torchrun [^`]*?-m )?dclr ([a-z][\w-]*(?: [^`|;&>]*)?)"
)
CLI = typer.main.get_command(app)  # with the lab's commands where dclr-lab is installed


def named_options(text: str) -> tuple[str, list[str], set[str]] | None:
    """(the command's path, the `--options` the text names, the options the command has) for the
    text after `dclr `; None when it names no leaf command (a group, or not a command)."""
    try:
        tokens = shlex.split(text)
    except ValueError:  # an unclosed quote in prose
        tokens = text.split()
    command, path = CLI, []
    for token in tokens:
        subcommands = getattr(command, "commands", {})
        if token not in subcommands:
            break
        command, path = subcommands[token], [*path, token]
    if not path or hasattr(command, "commands"):
        return None
    known = {"--help"}
    for parameter in command.params:
        known.update(parameter.opts, parameter.secondary_opts)
    named = [t.split("=")[0].rstrip(".,)") for t in tokens if t.startswith("--") and t != "--"]
    return " ".join(path), named, known


def option_mentions() -> list[tuple[str, str, str, bool]]:
    """(`doc:line`, `dclr <command>`, option, whether the command has it) for each named option."""
    found = []
    for where, _, match in mentions(COMMAND_LINE):
        parsed = named_options(match.group(1))
        if parsed:
            command, named, known = parsed
            found += [(where, command, option, option in known) for option in named]
    return found


OPTIONS = option_mentions()


def test_enough_mentions_are_parsed():
    assert len(PATHS) > 150 and len(MODULES) > 80  # the docs name more; a parser bug finds none
    assert len(OPTIONS) > 100


def missing_path(where: str, line: str, path: str) -> str | None:
    """What is wrong with a line's mention of `path`, or None."""
    if (REPO_ROOT / path).exists() or HISTORY_ONLY in line:
        return None
    return (
        f"{where} names `{path}`, which is not in the repository: point it at the file's new "
        f"place, or say on that line that only {HISTORY_ONLY} keeps it"
    )


@pytest.mark.parametrize(("where", "line", "path"), PATHS, ids=[p[0] for p in PATHS])
def test_a_named_path_exists(where, line, path):
    problem = missing_path(where, line, path)
    assert problem is None, problem


def resolve(dotted: str, attribute: str | None) -> object:
    """The object `dotted[:attribute]` names (the standard library's reading of such names)."""
    return pkgutil.resolve_name(dotted + (f":{attribute}" if attribute else ""))


@pytest.mark.parametrize(
    ("where", "dotted", "attribute"), MODULES, ids=[f"{w}:{d}" for w, d, _ in MODULES]
)
def test_a_named_module_or_object_imports(where, dotted, attribute):
    named = dotted + (f":{attribute}" if attribute else "")
    try:
        resolve(dotted, attribute)
    except (ImportError, AttributeError) as error:
        pytest.fail(f"{where} names `{named}`, which does not import: {error}")


def test_the_path_check_is_red_on_a_moved_file():
    line = "Pinned to a hand-written formula in `tests/test_consert.py`."  # moved to tests/methods/
    ((where, _, match),) = [("x.md:1", line, m) for m in PATH.finditer(line)]
    assert missing_path(where, line, file_part(match.group(1))) == (
        "x.md:1 names `tests/test_consert.py`, which is not in the repository: point it at the "
        "file's new place, or say on that line that only git history keeps it"
    )
    assert missing_path(where, line + " (in git history only)", "tests/test_consert.py") is None
    assert missing_path(where, line, "tests/methods/test_consert.py") is None
    assert file_part("tests/dualcse/test_dualcse_*.py") is None  # a glob names no one file


def test_the_module_check_is_red_on_a_module_that_is_gone():
    line = "`method: simcse_sup` (`dclr.dualcse.simcse_sup`): anchor = premise"  # folded away
    ((dotted, attribute),) = [m.groups() for m in MODULE_NAME.finditer(line)]
    assert is_package_module(dotted)
    with pytest.raises(AttributeError):
        resolve(dotted, attribute)
    with pytest.raises(AttributeError):
        resolve("dclr.methods.dualcse", "NOT_A_METHOD")
    assert resolve("dclr.methods.dualcse", "SIMCSE_SUP_INLI") is not None
    assert not is_package_module("dclr.noise_gradient")  # a config key, not checked


@pytest.mark.parametrize(
    ("where", "command", "option", "exists"), OPTIONS, ids=[f"{w}:{o}" for w, _, o, _ in OPTIONS]
)
def test_a_named_option_exists(where, command, option, exists):
    assert exists, f"{where} shows `dclr {command} {option}`, which `dclr {command} --help` lacks"


def test_the_option_check_is_red_on_an_option_that_is_gone():
    line = "not `dclr experiment run … --resume`: that runner trains dclr's own recipes"
    ((command, named, known),) = [named_options(m.group(1)) for m in COMMAND_LINE.finditer(line)]
    if command != "experiment run":  # the lab is not installed: its commands are not there
        pytest.skip("dclr-lab is not installed")
    assert named == ["--resume"] and "--resume" not in known and "--dry-run" in known
    line = "    dclr train recipes/dclr_minilm_cpu.yaml --set run.seed=1 --no-eval | tail"
    ((command, named, known),) = [named_options(m.group(1)) for m in COMMAND_LINE.finditer(line)]
    assert command == "train" and named == ["--set", "--no-eval"] and set(named) <= known
    assert named_options("data --help") is None  # a group, not a leaf command


# `--set key=value` / `--grid key=v1,v2`: a training option, dotted (`dclr.noise_ratio`) or flat
SET_KEY = re.compile(r"--(?:set|grid)[ =]([a-z_][\w.]*)=")
PLACEHOLDER_KEYS = frozenset({"key", "field", "section.field"})  # the syntax, not an option


def known_option_keys() -> set[str]:
    """Every `--set` key some recipe accepts: `section.field` of the core sections and of every
    method's section, and each field's flat name (`dclr.options.flat`)."""
    sections = {**CORE_SECTIONS, **section_classes()}
    known = set()
    for section, cls in sections.items():
        for field in dataclasses.fields(cls):
            known.update({f"{section}.{field.name}", flat_name(cls, field.name)})
    return known


KNOWN_KEYS = known_option_keys()
SET_KEYS = [
    (where, m.group(1)) for where, _, m in mentions(SET_KEY) if m.group(1) not in PLACEHOLDER_KEYS
]


@pytest.mark.parametrize(("where", "key"), SET_KEYS, ids=[f"{w}:{k}" for w, k in SET_KEYS])
def test_a_set_key_is_an_option(where, key):
    assert key in KNOWN_KEYS, (
        f"{where} sets `{key}`, which no recipe section has: see `dclr config show RECIPE` for "
        "the options and their sections"
    )


def test_the_set_key_check_is_red_on_an_option_that_is_not_there():
    assert len(SET_KEYS) > 25  # the docs set more; a parser bug finds none
    line = "dclr train R --set optimisation.learning_rate=1e-5 --set noise_steps=1 --set lr=3"
    assert [m.group(1) for m in SET_KEY.finditer(line)] == [
        "optimisation.learning_rate", "noise_steps", "lr",
    ]  # fmt: skip
    assert {"optimisation.learning_rate", "noise_steps", "dclr.noise_steps", "model"} <= KNOWN_KEYS
    assert "lr" not in KNOWN_KEYS and "optimisation.noise_steps" not in KNOWN_KEYS


# `python benchmarks/NAME.py …` / `bash scripts/NAME.sh …`: the repository's own scripts' options
SCRIPT_LINE = re.compile(
    r"(?:python3?|bash) ((?:benchmarks|scripts)/[\w-]+\.(?:py|sh))((?: [^`|;&>#]*)?)"
)


@functools.cache  # one read per script, not one per mention
def script_source(path: str) -> str:
    """The script's text with that of the sibling modules it imports (a shared argument parser)
    or, for a shell script, of the repository's Python scripts it runs (its "$@" goes there)."""
    script = REPO_ROOT / path
    text = script.read_text(encoding="utf-8")
    if script.suffix == ".sh":
        ran = [REPO_ROOT / p for p in re.findall(r"(?:benchmarks|scripts)/[\w-]+\.py", text)]
    else:
        imported = re.findall(r"^\s*(?:from|import) (\w+)", text, flags=re.MULTILINE)
        ran = [script.with_name(f"{name}.py") for name in imported]
    return text + "".join(p.read_text(encoding="utf-8") for p in ran if p.exists())


def script_options() -> list[tuple[str, str, str, bool]]:
    """(`doc:line`, script, option, whether the script defines it) for each option shown."""
    found = []
    for where, _, match in mentions(SCRIPT_LINE):
        path, arguments = match.groups()
        if not (REPO_ROOT / path).exists():
            continue  # test_a_named_path_exists speaks for a backticked one
        source = script_source(path)
        for token in arguments.split():
            option = token.split("=")[0].strip("[]").rstrip(".,)")
            if option.startswith("--") and option != "--":
                found.append((where, path, option, defines(source, option)))
    return found


def defines(source: str, option: str) -> bool:
    """Whether a script's source defines `option`: argparse's quoted name, or a shell `case` arm."""
    return any(form in source for form in (f'"{option}"', f"'{option}'", f"{option})"))


SCRIPT_OPTIONS = script_options()


@pytest.mark.parametrize(
    ("where", "script", "option", "exists"),
    SCRIPT_OPTIONS,
    ids=[f"{w}:{s}:{o}" for w, s, o, _ in SCRIPT_OPTIONS],
)
def test_a_script_option_exists(where, script, option, exists):
    assert exists, f"{where} shows `{script} {option}`, which {script} does not define"


def test_the_script_option_check_is_red_on_an_option_that_is_not_there():
    assert len(SCRIPT_OPTIONS) > 40  # the docs show more; a parser bug finds none
    line = "python benchmarks/int8_encode.py --data-dir ../shared/data --no-such-option 3"
    ((path, arguments),) = [m.groups() for m in SCRIPT_LINE.finditer(line)]
    source = script_source(path)
    assert path == "benchmarks/int8_encode.py" and defines(source, "--data-dir")
    assert "--no-such-option" in arguments and not defines(source, "--no-such-option")
    shell = script_source("benchmarks/gpu_check.sh")  # passes its arguments to gpu_check.py
    assert defines(shell, "--tiny") and not defines(shell, "--no-such-option")
