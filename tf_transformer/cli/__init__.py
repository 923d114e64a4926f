"""The command-line binaries: `tft-train`, `tft-translate`, ... (`pip install .`), and their wrappers in a checkout.

One module per binary holds its absl flags, `main(argv)` and `run()`; its docstring is the binary's --help text.
Only the binaries import this package: importing one of its modules defines its flags in absl's global FLAGS, which
a library must not do (tests/tools/test_console_commands.py checks that nothing else imports it).
"""

import contextlib
import gc
import logging as pylogging
import os
import re
import sys
import tempfile

from absl import app, flags

from tf_transformer.allocator import keep_freed_memory

# Every command has it (adopt_help shows it in each --help).
_TF_LOG = flags.DEFINE_bool(
    "tf_log",
    False,
    "Show TensorFlow's own C++ log lines (start-up notices, warnings), which are hidden by default; "
    "setting TF_CPP_MIN_LOG_LEVEL in the environment does the same and sets their level.",
)


def adopt_help(module_name: str, *shared_flag_modules: str) -> None:
    """Makes absl's --help and --helpfull show the docstring and flags of the binary's module `module_name`,
    and the flags it takes from `shared_flag_modules` (e.g. `tf_transformer.cli._decoding_flags`).

    absl's usage text is `__main__`'s docstring followed by the flags of the module named `sys.argv[0]` (--help:
    only those; --helpfull: those first). Here `__main__` is the stub pip writes for a console command, or a
    checkout's wrapper script, and both the docstring and the flags live in `module_name`: they are handed to the
    script, so that --help shows the command's usage text and flags whichever script starts it.
    """
    module = sys.modules[module_name]
    main = sys.modules["__main__"]
    if main is not module:  # python -m tf_transformer.cli.X: the module is __main__ already
        main.__doc__ = module.__doc__
    by_module = flags.FLAGS.flags_by_module_dict()  # the dict itself, not a copy
    for name in (module_name, __name__, *shared_flag_modules):
        if name != sys.argv[0] and name in by_module:
            by_module.setdefault(sys.argv[0], []).extend(by_module.pop(name))


@contextlib.contextmanager
def exit_on(*error_types: type[BaseException]):
    """Inside, an error of `error_types` (the package's own errors say what is wrong and the fix) ends the
    binary with one `error: ...` line on stderr and exit status 1, never a traceback."""
    try:
        yield
    except error_types as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)


def check_weights_flags(checkpoint, average_last) -> None:
    """A ValueError when both ways of choosing the weights (--checkpoint, --average_last) are given: the commands
    say so, naming their flags, before anything is loaded."""
    if checkpoint is not None and average_last is not None:
        raise ValueError("--checkpoint and --average_last: give one of them.")


@contextlib.contextmanager
def progress_bar(total: int, unit: str, shown: bool):
    """Inside, a `progress(done, total)` callback that moves a tqdm bar on stderr, or None when not `shown` (the
    commands show it when their output goes to a file, not when it goes to the terminal's stdout)."""
    if not shown:
        yield None
        return
    import tqdm

    with tqdm.tqdm(total=total, unit=unit, file=sys.stderr) as bar:
        yield lambda done, total: bar.update(done - bar.n)


def write_output(path, lines) -> None:
    """`lines` (str, without newlines) to the file `path`, written atomically, or to stdout as UTF-8 when None."""
    text = "".join(line + "\n" for line in lines)
    if path is None:
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.flush()
    else:
        from tf_transformer.files import write_atomically

        write_atomically(path, text)


# TensorFlow's start-up lines that TF_CPP_MIN_LOG_LEVEL cannot hide, dropped while TensorFlow starts: INFO and
# WARNING lines (absl's `I0000 00:00:...  file.cc:31] ...`, or tsl's `2026-... I file.cc:31] ...`; the CUDA stub's
# "Could not find cuda drivers" is logged while the libraries load, before TensorFlow reads the variable),
# absl's note that they go to stderr, cpu_feature_guard's second line, and the CUDA errors that every machine
# without a usable GPU logs (failed cuInit; the duplicate cuDNN / cuFFT / cuBLAS factories).
_STARTUP_NOISE = re.compile(
    r"^(?:[IW]\d{4} |\d{4}-\d\d-\d\d [\d:.]+: [IW] |WARNING: All log messages before absl::InitializeLog\(\)"
    r"|To enable the following instructions:|[EF]\d{4} .*(?:cuInit|Unable to register cu\w+ factory))"
)


# Packages that TensorFlow's start imports when they are installed, and that no command uses: JAX (tf.lite tries
# `from jax import jit`) and matplotlib (Keras' visualization imports pyplot). Both imports are optional there, so
# while TensorFlow starts each fails as if the package were absent: about 1.8 s less CPU a command where they are
# installed (benchmarks/NOTES.md entry 43). tft-plot-attention imports matplotlib after the start, as usual.
_UNUSED_AT_START = ("jax", "matplotlib")


def start_tensorflow(show_log: bool = False) -> None:
    """Imports TensorFlow, with Keras on it whatever KERAS_BACKEND or keras.json say (the commands' decoders, input
    and SavedModels are TensorFlow's; a model trained under another backend loads all the same), without
    `_UNUSED_AT_START`, and without TensorFlow's C++ log on the console unless `show_log` or TF_CPP_MIN_LOG_LEVEL is
    set (`_import_tensorflow`). Run before anything imports TensorFlow: a command's heavy imports are inside main().
    The import's objects (modules, classes, functions: they live as long as the process) are made without the cyclic
    collector and then frozen out of its later passes (`_without_collections`).
    """
    if "tensorflow" in sys.modules:
        return
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    if backend != "tensorflow":
        pylogging.getLogger("tf_transformer").info(
            "Keras backend: tensorflow, not KERAS_BACKEND=%s (the tft commands are TensorFlow's).", backend
        )
    os.environ["KERAS_BACKEND"] = "tensorflow"
    with _absent(_UNUSED_AT_START), _without_collections():
        _import_tensorflow(show_log)


@contextlib.contextmanager
def _absent(names):
    """Inside, importing any of the packages `names` (not yet imported) raises ModuleNotFoundError."""
    hidden = [name for name in names if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # the import system's own marker for "import fails"
    try:
        yield
    finally:
        for name in hidden:
            if sys.modules.get(name, "") is None:
                del sys.modules[name]


@contextlib.contextmanager
def _without_collections():
    """No cyclic garbage collection inside, and what exists at the end is frozen (`gc.freeze`): later collections
    skip it. TensorFlow's import makes objects that stay for the whole run, so collecting them, during the import and
    on every later full pass, finds nothing: about 1.1-1.2 s less CPU a command (benchmarks/NOTES.md entry 44)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
    gc.freeze()


def _import_tensorflow(show_log: bool) -> None:
    """TF_CPP_MIN_LOG_LEVEL=3 hides TensorFlow's INFO, WARNING and ERROR lines for the whole run (FATAL ones, which
    end the process, still show). Level 2 would keep the ERROR lines, but those that come while a command runs
    are notices too: with oneDNN on an AVX2-only CPU every training prints "oneDNN supports DT_INT64 only on
    platforms with AVX-512. Falling back ..." at ERROR level. A C++ error that stops the work comes back to
    Python as an exception, which the command reports as its `error:` line (or a traceback), so hiding the lines
    loses no failure; `--tf_log` shows them all. Some lines come before TensorFlow reads that variable, while
    its libraries load: while TensorFlow starts (the import, and the device list that initializes CUDA), stderr
    goes to a file, and what is not `_STARTUP_NOISE` is written back. The variable counts only at TensorFlow's
    import."""
    if show_log or "TF_CPP_MIN_LOG_LEVEL" in os.environ:  # the user asked: change nothing
        import keras  # noqa: F401
        import tensorflow  # noqa: F401

        return
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            import keras  # noqa: F401
            import tensorflow as tf

            tf.config.list_physical_devices()  # initializes CUDA where TensorFlow has it
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            lines = capture.read().decode("utf-8", errors="replace").splitlines(keepends=True)
            sys.stderr.write("".join(line for line in lines if not _STARTUP_NOISE.match(line)))
            sys.stderr.flush()


def run_binary(module_name: str, main, *shared_flag_modules: str, check_flags=None, needs_tensorflow=None) -> None:
    """The console command of the binary `module_name`: its --help (`adopt_help`), then absl's `app.run(main)`,
    which parses the flags, runs `check_flags` if given (the checks that need neither TensorFlow nor a model: a bad
    flag is refused in a second, its error one `error:` line), has malloc keep freed memory (`keep_freed_memory`:
    fewer page faults), starts TensorFlow (`start_tensorflow`: quietly unless --tf_log) and calls `main(argv)`, or
    `main(argv, what check_flags returned)`. --help needs neither TensorFlow nor main, so it is instant when the
    binary's module imports no TensorFlow. `needs_tensorflow(what check_flags returned)`, if given, may say False:
    then main runs without TensorFlow (tft-evaluate scoring a file)."""
    adopt_help(module_name, *shared_flag_modules)

    def main_after_tensorflow(argv):
        arguments = [argv]
        if check_flags is not None:
            with exit_on(FileNotFoundError, FileExistsError, ValueError):  # ConfigError is a ValueError
                arguments.append(check_flags())
        if needs_tensorflow is None or needs_tensorflow(*arguments[1:]):
            memory = keep_freed_memory()  # before TensorFlow's threads take arenas of their own
            start_tensorflow(show_log=_TF_LOG.value)
            if memory:
                pylogging.getLogger("tf_transformer").info("Memory: %s.", memory)  # beside the Precision line
        return main(*arguments)

    app.run(main_after_tensorflow)
