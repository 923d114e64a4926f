"""The command-line binaries: `tft-train`, `tft-translate`, ... (`pip install .`), and tools/*.py in a checkout.

One module per binary holds its absl flags, `main(argv)` and `run()`; its docstring is the binary's --help text.
Only the binaries import this package: importing one of its modules defines its flags in absl's global FLAGS, which
a library must not do (tests/tools/test_console_commands.py checks that nothing else imports it).
"""

import contextlib
import sys

from absl import app, flags


def adopt_help(module_name: str, *shared_flag_modules: str) -> None:
    """Makes absl's --help and --helpfull show the docstring and flags of the binary's module `module_name`,
    and the flags it takes from `shared_flag_modules` (e.g. `tf_transformer.cli._decoding_flags`).

    absl's usage text is `__main__`'s docstring followed by the flags of the module named `sys.argv[0]` (--help:
    only those; --helpfull: those first). Here `__main__` is the stub pip writes for a console command, or a
    tools/*.py wrapper, and both the docstring and the flags live in `module_name`: they are handed to the script,
    so that --help reads as it did when the flags were defined in tools/*.py itself.
    """
    module = sys.modules[module_name]
    main = sys.modules["__main__"]
    if main is not module:  # python -m tf_transformer.cli.X: the module is __main__ already
        main.__doc__ = module.__doc__
    by_module = flags.FLAGS.flags_by_module_dict()  # the dict itself, not a copy
    for name in (module_name, *shared_flag_modules):
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


def run_binary(module_name: str, main, *shared_flag_modules: str) -> None:
    """The console command of the binary `module_name`: its --help (`adopt_help`), then absl's `app.run(main)`."""
    adopt_help(module_name, *shared_flag_modules)
    app.run(main)
