"""The docs stay true. Every `tft-*` command line in the shell code blocks of README.md and docs/*.md, and every
example line of a command's --help, passes only flags its command defines, with values the command accepts, and
reads only files that exist or that an earlier command on the same page makes (every page may assume that the
README's main job has run: its tft-train makes runs/multi30k). Each --help opens with one or two such examples.
And the README stays a short front page: few words, its two set-up commands on top, a short results table,
links into docs/. docs/DESIGN.md stays a map of the code: at most 2,500 words, and every `file.py:function` it names
is defined there.

absl judges the flags: a child process imports the command's module (which defines its flags, and imports no
TensorFlow) and parses each command line with absl's own parser, as the command would; then the command's own
checks of its flags (its `check_flag_values`: values, flags that go together, the configs they make) run on it.
"""

import ast
import concurrent.futures
import configparser
import dataclasses
import functools
import json
import os
import posixpath
import re
import shlex
import subprocess
import sys
import textwrap

import pytest

from tf_transformer.decoding.settings import DEFAULTS as DECODING_DEFAULTS  # imports no TensorFlow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)  # not resolved: a venv's python is a link into the base install
PAGES = ["README.md"] + sorted(
    f"docs/{name}" for name in os.listdir(os.path.join(ROOT, "docs")) if name.endswith(".md")
)
SHELL_LANGUAGES = {"", "bash", "sh", "shell"}
MULTI30K = "../shared/data/multi30k"  # where the docs say the data is, beside the checkout


def console_scripts():
    """{"tft-train": "tf_transformer.cli.train", ...}: the commands setup.cfg installs and their modules."""
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, "setup.cfg"))
    lines = parser["options.entry_points"]["console_scripts"].strip().splitlines()
    return dict((name.strip(), target.strip().split(":")[0]) for name, target in (line.split("=") for line in lines))


COMMANDS = console_scripts()
# Flags whose value is a file or folder the command reads; --config only when a path (not a preset name),
# --checkpoint only when a path (not "best"), --model_dir except for the commands that make it.
INPUT_FLAGS = {
    "input", "sources", "references", "targets", "hypotheses", "target_prefix", "train_source", "train_target",
    "valid_source", "valid_target", "saved_model", "init_from", "data_dir", "data_config", "model_dir", "config",
    "checkpoint",
}  # fmt: skip
MAKES_MODEL_DIR = {"tft-train", "tft-demo"}
OUTPUT_FLAGS = {"output", "output_dir", "export_dir"}

# Run in a child per command: importing a cli module defines its flags in absl's global FLAGS, so two commands'
# modules cannot share a process. Reads a JSON list of argument lists; writes, for each, absl's error or the
# values of the flags given.
FLAG_CHECK = r"""
import importlib, json, os, sys
from absl import app, flags
module = importlib.import_module(sys.argv[1])
app.define_help_flags()  # --help, --helpfull, ...: app.run defines them
FLAGS = flags.FLAGS
HELP_TYPES = (app.HelpFlag, app.HelpshortFlag, app.HelpfullFlag, app.HelpXMLFlag)
HELP = {name for name in FLAGS if isinstance(FLAGS[name], HELP_TYPES)}
results = []
for argv in json.load(sys.stdin):
    # absl would print the usage and exit on a help flag: take it out, and then a missing required flag is fine.
    asks_help = [arg for arg in argv if arg.startswith("-") and arg.lstrip("-").split("=")[0] in HELP]
    FLAGS.unparse_flags()
    try:
        FLAGS([sys.argv[1]] + [arg for arg in argv if arg not in asks_help])
    except flags.Error as error:
        if not (asks_help and isinstance(error, flags.IllegalFlagValueError)):
            results.append({"error": str(error)})
            continue
    given = {name: FLAGS[name].value for name in FLAGS if FLAGS[name].present}
    # Then the command's own checks of its flags (what it refuses after absl: --beam_size=0, a bad --override),
    # which read no file but a config file named by --config or --data_config: skipped when that is missing (the
    # page may make it; the paths are judged against what the page makes, in walk).
    configs = [str(given.get(name, "")) for name in ("config", "data_config")]
    if not asks_help and hasattr(module, "check_flag_values") and all(
        not path.endswith(".json") or os.path.isfile(path) for path in configs
    ):
        try:
            module.check_flag_values()
        except (ValueError, app.UsageError) as error:  # ConfigError is a ValueError
            results.append({"error": str(error), "flags": given})
            continue
    results.append({"flags": given})
print(json.dumps(results, default=str))
"""


@dataclasses.dataclass
class Command:
    """One simple command of a shell line: its program (a `tft-*` command also when run as `python
    tools/X.py`), arguments and redirections; for a `tft-*` command, absl's verdict on its flags."""

    page: str
    line: int
    program: str
    args: list
    reads: list  # < file
    writes: list  # > file, >> file
    downloads: bool  # the line fetches files from the network
    error: str = None
    flags: dict = None

    @property
    def where(self):
        return f"{self.page}:{self.line}: `{self.program}`"


def strip_comment(line):
    """The line without its shell comment: a `#` outside quotes that starts a word."""
    quote, escaped, previous = None, False, " "
    for index, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (previous.isspace() or previous in ";&|()<>"):
            return line[:index]
        previous = char
    return line


FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)\s*$")


def lines_with_blocks(markdown):
    """(line number, line, language) for each line of the page that is not a fence: language is the lowercased
    language of the code block the line is in ("" for a block without one), None outside code blocks."""
    fence, language = None, None
    for number, line in enumerate(markdown.splitlines(), 1):
        match = FENCE.match(line)
        if fence is None:
            if match:
                fence, language = match.group(1), match.group(2).lower()
                continue
        elif match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) and not match.group(2):
            fence, language = None, None
            continue
        yield number, line, language


def shell_lines(markdown):
    """(line number, line) for each line of the page's shell code blocks (```bash, ```sh or no language),
    backslash continuations joined (numbered by their first line) and comments dropped."""
    pending = None
    for number, line, language in lines_with_blocks(markdown):
        if language not in SHELL_LANGUAGES:
            continue
        code = strip_comment(line).strip()
        start, code = (pending[0], f"{pending[1]} {code}") if pending else (number, code)
        if code.endswith("\\"):
            pending = (start, code[:-1].rstrip())
            continue
        pending = None
        if code:
            yield start, code


SEPARATORS = {"|", "||", "&&", ";", "&", "(", ")", "|&", ";;"}
VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)\}")


def commands_of(page, number, line, variables):
    """The simple commands of one shell line, with the page's shell `variables` so far expanded ($HOME and
    `~` stay: where they lead depends on the machine)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split, lexer.commenters = True, ""
    tokens = list(lexer)  # ValueError: an unbalanced quote
    groups, group = [], []
    for token in tokens:
        if token in SEPARATORS:
            groups.append(group)
            group = []
        else:
            group.append(token)
    groups.append(group)
    commands = []
    for group in filter(None, groups):
        args, reads, writes, index = [], [], [], 0
        while index < len(group):
            token = group[index]
            following = group[index + 1] if index + 1 < len(group) else ""
            if re.fullmatch(r"\d", token) and following in ("<", ">", ">>", ">&"):  # the 2 of 2>file
                pass
            elif token in ("<", ">", ">>", "&>", ">|", ">&"):
                if token == "<":
                    reads.append(following)
                elif token != ">&" or not following.isdigit():  # >&2 is a stream, not a file
                    writes.append(following)
                index += 1
            else:
                args.append(VARIABLE.sub(lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), token))
            index += 1
        assigns = {}
        while args and re.match(r"[A-Za-z_]\w*=", args[0]):
            name, value = args.pop(0).split("=", 1)
            assigns[name] = value
        if not args:  # NAME=value alone sets a shell variable; before a program, only the program's
            variables.update(assigns)
        program = args[0] if args else ""
        if program in ("python", "python3") and len(args) > 1:  # a checkout's tools/X.py is its command
            tool = re.fullmatch(r"(?:.*/)?tools/(\w+)\.py", args[1])
            if tool and f"tft-{tool.group(1).replace('_', '-')}" in COMMANDS:
                program = f"tft-{tool.group(1).replace('_', '-')}"
                args = [program] + args[2:]
        downloads = "download" in line.lower() or program in ("wget", "curl") and ("-o" in args or "-O" in args)
        commands.append(Command(page, number, program, args[1:], reads, writes, downloads))
    return commands


def parse_page(page, lines):
    """The commands of a page's (line number, line) pairs, and the issues of lines that do not parse."""
    commands, issues, variables = [], [], {}
    for number, line in lines:
        try:
            commands.extend(commands_of(page, number, line, variables))
        except ValueError as error:  # only a problem where the line runs a command of ours
            if re.search(r"(^|[|;&]\s*)(tft-|python3? \S*tools/)", line):
                issues.append(
                    f"{page}:{number}: cannot parse {line!r} as a shell line ({error}). Fix: close the quote."
                )
    return commands, issues


def check_flags(commands):
    """Sets each `tft-*` command's `error` or `flags` (absl's verdict), one child process per command."""
    by_program = {}
    for command in commands:
        if command.program in COMMANDS:
            by_program.setdefault(command.program, []).append(command)

    def check(program):
        batch = by_program[program]
        result = subprocess.run(
            [sys.executable, "-c", FLAG_CHECK, COMMANDS[program]], input=json.dumps([c.args for c in batch]),
            capture_output=True, text=True, timeout=120, cwd=ROOT,
        )  # fmt: skip
        assert result.returncode == 0, f"{program}: the flag check failed:\n{result.stderr[-3000:]}"
        for command, verdict in zip(batch, json.loads(result.stdout), strict=True):
            command.error, command.flags = verdict.get("error"), verdict.get("flags")

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(check, by_program))


def normalized(path):
    return posixpath.normpath(path.rstrip("/")) if path else path


class Made:
    """The files and folders the commands so far have made: a path is made when its nearest listed self or
    parent is marked made (tft-train makes X but not X/best unless with --bleu_every)."""

    def __init__(self, entries=None):
        self.entries = dict(entries or {})

    def mark(self, path, made=True):
        self.entries[normalized(path)] = made

    def mark_missing(self, path):  # unless something made it before
        self.entries.setdefault(normalized(path), False)

    def __contains__(self, path):
        path = normalized(path)
        while path not in ("", ".", "/", ".."):
            if path in self.entries:
                return self.entries[path]
            path = posixpath.dirname(path)
        return False


def is_multi30k_name(name):
    """Whether `name` is a Multi30k file (train.en.gz, ...)."""
    return multi30k_name_pattern().fullmatch(name) is not None


@functools.cache
def multi30k_name_pattern():
    """The pattern of Multi30k's file names from the stems of tf_transformer/data/multi30k.py's table, read
    without importing it (it imports TensorFlow)."""
    with open(os.path.join(ROOT, "tf_transformer", "data", "multi30k.py"), encoding="utf-8") as handle:
        module = ast.parse(handle.read())
    for node in module.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "MULTI30K_FILES":
            stems = ast.literal_eval(node.value).values()
            return re.compile(rf"(?:{'|'.join(map(re.escape, stems))})\.[a-z]{{2}}\.gz")
    raise AssertionError("tf_transformer/data/multi30k.py lost MULTI30K_FILES")


def exists(path, flag):
    """Whether `path`, relative to the checkout, is there (for --checkpoint, a prefix whose files are). Without
    the Multi30k folder beside the checkout (on another machine; or at $MULTI30K_DIR), its files count by name."""
    data = os.environ.get("MULTI30K_DIR", os.path.join(ROOT, MULTI30K))
    if normalized(path) == MULTI30K or path.startswith(MULTI30K + "/"):
        name = path[len(MULTI30K) + 1 :]
        if not os.path.isfile(os.path.join(data, "train.en.gz")):
            return not name or is_multi30k_name(name)
        path = os.path.join(data, name)
    full = os.path.join(ROOT, path)
    if flag == "--checkpoint" and os.path.isdir(os.path.dirname(full)):
        prefix = os.path.basename(full) + "."
        return os.path.exists(full) or any(name.startswith(prefix) for name in os.listdir(os.path.dirname(full)))
    return os.path.exists(full)


def inputs_of(command):
    """(flag or "<", path) for each file or folder the command reads."""
    given = command.flags or {}
    for name in sorted(INPUT_FLAGS & set(given)):
        value = given[name]
        if not isinstance(value, str) or not value:
            continue
        if name == "config" and "/" not in value and not value.endswith(".json"):
            continue  # a preset's name
        if name == "checkpoint" and "/" not in value:
            continue  # best
        if name == "model_dir" and command.program in MAKES_MODEL_DIR:
            continue
        yield f"--{name}", value
    for path in command.reads if command.program in COMMANDS else []:
        yield "<", path


def walk(commands, made):
    """The issues of one page's commands in order, marking in `made` what each makes."""
    issues, downloaded = [], False
    for command in commands:
        if command.program in COMMANDS:
            module = COMMANDS[command.program].replace(".", "/") + ".py"
            if command.error:
                error = "; ".join(line.strip() for line in command.error.strip().rstrip(".").splitlines())
                issues.append(
                    f"{command.where}: {error}. Fix: use only the flags and values `{command.program} "
                    f"--helpfull` lists (defined in {module})."
                )
            for arg in command.args:
                if arg.startswith("[-"):
                    issues.append(
                        f"{command.where}: {arg}: an optional part in brackets does not run as typed. Fix: write "
                        "the flag without brackets, or say in the text that it is optional."
                    )
        for flag, path in inputs_of(command):
            if flag == "<" and path.endswith(".gz"):
                issues.append(
                    f"{command.where}: < {path}: the commands read stdin as plain text, not gzip. Fix: "
                    f"--input={path} (or the command's flag for its input file)."
                )
            elif path.startswith(("~", "$HOME", "${HOME}")):
                if not downloaded:
                    issues.append(
                        f"{command.where}: {flag} {path}: a file in the home folder that no earlier command on the "
                        "page downloads. Fix: show the download first, or use a file of the checkout or "
                        f"{MULTI30K}/."
                    )
            elif path not in made and not exists(path, flag):
                issues.append(
                    f"{command.where}: {flag} {path}: no such file, and no earlier command on the page makes it. "
                    f"Fix: use a file that exists (e.g. {MULTI30K}/val.en.gz, runs/multi30k from the README's main "
                    "job), or first show the command that makes it."
                )
        downloaded = downloaded or command.downloads
        given = command.flags or {}
        for path in command.writes + [str(given[name]) for name in OUTPUT_FLAGS & set(given)]:
            made.mark(path)
        if command.program == "tee":
            for path in command.args:
                if not path.startswith("-"):
                    made.mark(path)
        if command.program in MAKES_MODEL_DIR and given.get("model_dir"):
            model_dir = given["model_dir"]
            made.mark(model_dir)
            made.mark_missing(posixpath.join(model_dir, "averaged"))  # tft-average-checkpoints makes it
            if given.get("bleu_every"):  # the best checkpoint by validation BLEU
                made.mark(posixpath.join(model_dir, "best"))
            else:
                made.mark_missing(posixpath.join(model_dir, "best"))
        if command.program == "tft-average-checkpoints" and given.get("model_dir") and not given.get("output_dir"):
            made.mark(posixpath.join(given["model_dir"], "averaged"))
    return issues


def readme_text():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        return handle.read()


def main_job_lines():
    """The README's main job: its set-up line (`python3 -m venv ...`) that runs tft-train."""
    lines = shell_lines(readme_text())
    return [(number, line) for number, line in lines if line.startswith("python3 -m venv") and "tft-train" in line]


def check_pages(pages):
    """{page: issues} for {page: [(line number, line), ...]}, each page after the README's main job."""
    parsed = {page: parse_page(page, lines) for page, lines in pages.items()}
    main_job, _ = parse_page("README.md", main_job_lines())
    check_flags(main_job + [command for commands, _ in parsed.values() for command in commands])
    after_main_job = Made()
    walk(main_job, after_main_job)  # its own issues are README.md's
    return {page: issues + walk(commands, Made(after_main_job.entries)) for page, (commands, issues) in parsed.items()}


def run_help(name):
    path = os.path.join(BIN, name)
    if not os.path.isfile(path):
        pytest.fail(f"{path} is missing: the package is not pip-installed into this environment. Fix: pip install -e .")
    return subprocess.run([path, "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.fixture(scope="module")
def helps():
    """{command: its --help output}, each run as the user would (absl exits 1 after --help)."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = dict(zip(COMMANDS, pool.map(run_help, COMMANDS), strict=True))
    for name, result in results.items():
        assert result.returncode == 1 and result.stdout, f"{name} --help: status {result.returncode}\n{result.stderr}"
    return {name: result.stdout for name, result in results.items()}


def help_examples(text):
    """(line number, line) of the example lines of a --help text: the lines of its usage text (the module's
    docstring, before absl's flag list) that start with `tft-`."""
    usage = text.split("\nflags:\n")[0]
    return [(n, line.strip()) for n, line in enumerate(usage.splitlines(), 1) if line.strip().startswith("tft-")]


@pytest.fixture(scope="module")
def issues(helps):
    """{page or `tft-X --help`: its issues}, all pages checked in one go (one child process per command)."""
    pages = {}
    for page in PAGES:
        with open(os.path.join(ROOT, page), encoding="utf-8") as handle:
            pages[page] = list(shell_lines(handle.read()))
    for name, text in helps.items():
        pages[f"{name} --help"] = help_examples(text)
    return check_pages(pages)


@pytest.mark.parametrize("page", PAGES)
def test_the_commands_of_each_page_run_as_typed(issues, page):
    assert not issues[page], "\n".join(issues[page])


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_commands_help_opens_with_examples_that_run_as_typed(helps, issues, name):
    module = COMMANDS[name].replace(".", "/") + ".py"
    text = helps[name]
    problems = list(issues[f"{name} --help"])
    # absl prints the module docstring as it is: the summary line, a blank line, then the examples.
    paragraphs = text.split("\n\n")
    opening = paragraphs[1].strip().splitlines() if len(paragraphs) > 1 else []
    # One or two examples: of the command itself, and maybe one that makes its input or uses its output.
    ours = [line for line in opening if line.strip().startswith(f"{name} ")]
    if not 1 <= len(opening) <= 2 or not ours or not all(line.strip().startswith("tft-") for line in opening):
        problems.append(f"{name} --help: its second paragraph {opening} is not one or two examples of {name}.")
    # The decoding settings come from the model directory's decoding.json: an opening example that overrode
    # them would not show what the command does with a trained model.
    for line in opening:
        overriding = [f"--{key}" for key in DECODING_DEFAULTS if re.search(rf"--{key}(=|\s|$)", line)]
        if overriding:
            problems.append(f"{name} --help: {line.strip()!r} overrides decoding.json with {', '.join(overriding)}.")
    for number, line in help_examples(text):
        commands, unparsed = parse_page(f"{name} --help", [(number, line)])
        problems += unparsed
        # A docstring's backslash at a line end joins the lines (Python's escape), leaving a run of spaces.
        if line.endswith("\\") or len(commands) != 1 or re.search(r"\S {2,}-", line):
            problems.append(f"{name} --help:{number}: {line!r} is not one whole command on one line.")
    assert not problems, "\n".join(problems) + f"\nFix: the docstring of {module}."


def test_the_check_reports_wrong_flags_and_files():
    page = textwrap.dedent("""
        Text with `tft-translate --not_checked` outside code blocks.

        ```bash
        echo "A dog." | tft-translate --model_dir=runs/multi30k --no_such_flag=1
        tft-translate --model_dir=runs/multi30k --nowith_alignments --nomodel_dir  # --bogus in a comment
        tft-average-checkpoints --model_dir=runs/multi30k \\
            --num_checkpoints=two
        printf 'A dog.\\n' > in.en && tft-translate --model_dir=runs/multi30k --input=in.en --output=out.de
        tft-evaluate --references=../shared/data/multi30k/val.de.gz --hypotheses=out.de
        tft-translate --model_dir=runs/multi30k --checkpoint=runs/multi30k/averaged < not_made.en
        tft-average-checkpoints --model_dir=runs/multi30k
        tft-translate --model_dir=runs/multi30k --checkpoint=runs/multi30k/averaged --input=in.en
        tft-translate --model_dir=runs/multi30k --checkpoint=runs/multi30k/best --input=in.en
        tft-train --config=tiny --dataset=files --train_source=a.en --model_dir=runs/new --bleu_every=100
        tft-translate --model_dir=runs/new --checkpoint=runs/new/best --input=in.en
        python tools/score.py --model_dir=runs/multi30k --sources=in.en --targets=out.de --method=beam
        tft-evaluate --model_dir=runs/multi30k --sources=$HOME/.cache/x.en.gz --references=in.en
        tft-demo --task=copy [--model_dir=/tmp/demo]
        ```

        ```python
        tft-translate --in_python_code
        ```
        """)
    found = check_pages({"page.md": list(shell_lines(page))})["page.md"]
    expected = [
        "page.md:5: `tft-translate`: Unknown command line flag 'no_such_flag'",
        "page.md:6: `tft-translate`: Unknown command line flag 'nomodel_dir'",
        "page.md:7: `tft-average-checkpoints`: flag --num_checkpoints=two",
        "page.md:11: `tft-translate`: --checkpoint runs/multi30k/averaged: no such file",
        "page.md:11: `tft-translate`: < not_made.en: no such file",
        "page.md:14: `tft-translate`: --checkpoint runs/multi30k/best: no such file",
        "page.md:15: `tft-train`: train_target: dataset 'files' needs the training files",  # tft-train's own check
        "page.md:15: `tft-train`: --train_source a.en: no such file",
        "page.md:17: `tft-score`: Unknown command line flag 'method'",
        "page.md:18: `tft-evaluate`: --sources $HOME/.cache/x.en.gz: a file in the home folder",
        "page.md:19: `tft-demo`: [--model_dir=/tmp/demo]: an optional part in brackets",
    ]
    assert len(found) == len(expected) and all(
        issue.startswith(start) for issue, start in zip(found, expected, strict=True)
    ), "\n".join(found)
    assert all("Fix:" in issue for issue in found)


# The README is the front page: what to run, what it gives, where to read on.


def test_readme_is_at_most_2000_words():
    words = len(readme_text().split())
    assert words <= 2000, f"README.md has {words} words. Fix: at most 2,000; move the detail into docs/*.md."


def test_readme_has_its_two_set_up_commands_in_its_first_40_lines():
    numbers = [n for n, line in enumerate(readme_text().splitlines(), 1) if line.startswith("python3 -m venv")]
    assert len(numbers) == 2 and numbers[-1] <= 40, (
        f"README.md: the lines starting with `python3 -m venv` are lines {numbers}. Fix: two of them (the main job "
        "and the tests), both in the first 40 lines."
    )


def markdown_tables(text):
    """The tables outside code blocks, as (line number, rows as lists of cells), and the headings, as (line
    number, line)."""
    tables, headings, table = [], [], None
    for number, line, language in lines_with_blocks(text):
        if language is not None:
            table = None
            continue
        if line.startswith("#"):
            headings.append((number, line))
        if line.lstrip().startswith("|"):
            cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            if table is None:
                table = (number, [])
                tables.append(table)
            table[1].append(cells)
        else:
            table = None
    return tables, headings


def test_readme_results_table_has_at_most_8_rows():
    tables, headings = markdown_tables(readme_text())
    heading = next((number for number, line in headings if "results" in line.lower()), None)
    assert heading is not None, "README.md has no heading with Results. Fix: a `## ... results` section."
    table = next(((number, rows) for number, rows in tables if number > heading), None)
    assert table is not None, f"README.md: no table after the results heading (line {heading})."
    body = [row for row in table[1][1:] if not all(re.fullmatch(r":?-+:?", cell) for cell in row)]
    assert len(body) <= 8, (
        f"README.md:{table[0]}: the results table has {len(body)} rows. Fix: at most 8; the others belong in docs/."
    )


def test_readme_table_cells_are_at_most_250_characters():
    tables, _ = markdown_tables(readme_text())
    long = [
        f"README.md:{number + index}: a cell of {len(cell)} characters: {cell[:60]!r}..."
        for number, rows in tables
        for index, row in enumerate(rows)
        for cell in row
        if len(cell) > 250
    ]
    assert not long, "\n".join(long) + "\nFix: at most 250 characters a cell; say the rest below the table."


def test_readme_links_to_at_least_4_docs_pages():
    links = re.findall(r"\]\((?:\./)?(docs/[^)\s#]+\.md)(?:#[^)\s]*)?\)", readme_text())
    broken = sorted({link for link in links if not os.path.isfile(os.path.join(ROOT, link))})
    assert not broken, f"README.md links to missing pages: {broken}. Fix: link pages that exist."
    pages = sorted(set(links))
    assert len(pages) >= 4, f"README.md links to {len(pages)} docs/*.md pages ({pages}). Fix: at least 4."


def test_a_documented_command_line_gets_its_commands_own_checks():
    # Lines that absl's parser accepts but the commands refuse (their check_flag_values), on a page of their own.
    lines = {
        "tft-translate --model_dir=runs/multi30k --beam_size=0": "--beam_size",
        "tft-evaluate --hypotheses=hypotheses.de --language=de": "--references: missing",
        "tft-export --model_dir=runs/multi30k --export_dir=exports --checkpoint=best --average_last=2": (
            "--average_last"
        ),
        "tft-train --model_dir=runs/x --dataset=multi30k --override=num_heads=0": "num_heads",
        "tft-build-vocab --dataset=multi30k": "--output_dir is required",
    }
    issues = check_pages({"page.md": list(enumerate(lines, 1))})["page.md"]
    for number, (line, message) in enumerate(lines.items(), 1):
        assert any(issue.startswith(f"page.md:{number}: ") and message in issue for issue in issues), (line, issues)


# docs/DESIGN.md is the map of the code: read in ten minutes, and each `file.py` or `file.py:name` it names is there.

DESIGN = "docs/DESIGN.md"
CODE_SPAN = re.compile(r"`([^`\n]+)`")
CODE_REFERENCE = re.compile(r"((?:[\w-]+/)*[\w-]+\.py)(?::([A-Za-z_][\w.]*))?")


def design_text():
    with open(os.path.join(ROOT, DESIGN), encoding="utf-8") as handle:
        return handle.read()


def defined_names(body):
    """{name: node} of the functions, classes and assigned names a module's or a class's `body` defines."""
    names = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    names[target.id] = node
    return names


def missing_code_references(markdown):
    """The issues of the `path.py` and `path.py:name` (name: a function, class or assigned name, or Class.member)
    code spans of a page: paths relative to tf_transformer/ (to the checkout for tests/), each checked with `ast`."""
    issues = []
    for number, line in enumerate(markdown.splitlines(), 1):
        for span in CODE_SPAN.findall(line):
            match = CODE_REFERENCE.fullmatch(span.strip())
            if match is None:
                continue
            path, name = match.groups()
            full = os.path.join(ROOT, path if path.startswith("tests/") else os.path.join("tf_transformer", path))
            if not os.path.isfile(full):
                issues.append(f"{DESIGN}:{number}: `{span}`: no such file {os.path.relpath(full, ROOT)}.")
                continue
            if name is None:
                continue
            with open(full, encoding="utf-8") as handle:
                body = ast.parse(handle.read()).body
            for part in name.split("."):
                node = defined_names(body).get(part)
                if node is None:
                    issues.append(f"{DESIGN}:{number}: `{span}`: {path} defines no {name}.")
                    break
                body = getattr(node, "body", [])
    return issues


def test_design_md_is_a_map_of_at_most_2500_words():
    words = len(design_text().split())  # as `wc -w` counts
    assert words <= 2500, (
        f"{DESIGN} has {words} words. Fix: at most 2,500 (ten minutes' reading); the detail belongs in the docstrings, "
        "docs/*.md or benchmarks/NOTES.md."
    )


def test_every_file_and_function_design_md_names_exists():
    issues = missing_code_references(design_text())
    assert not issues, "\n".join(issues) + "\nFix: name what the code defines now (grep the package), or fix the map."


def test_the_design_check_reports_missing_files_and_names():
    page = textwrap.dedent("""
        `training/trainer.py:train` -> `training/trainer.py:no_such_phase`; `recipe.py:Recipe.of_model_dir`,
        `recipe.py:Recipe.no_such_method`, `config.py:TransformerConfig.CHANGEABLE_FIELDS`, `no/such_module.py`,
        `tests/test_docs.py:missing_code_references`, `cli/<name>.py:run` (a pattern, not a path), `model.fit`.
        """)
    found = missing_code_references(page)
    assert [issue.split(": ", 2)[1] for issue in found] == [
        "`training/trainer.py:no_such_phase`", "`recipe.py:Recipe.no_such_method`", "`no/such_module.py`",
    ], found  # fmt: skip
    assert all(issue.endswith(".") for issue in found)
