"""The command-line binaries: `tft-train`, `tft-translate`, ... (`pip install .`), and tools/*.py in a checkout.

One module per binary holds its absl flags, `main(argv)` and `run()`; its docstring is the binary's --help text.
Only the binaries import this package: importing one of its modules defines its flags in absl's global FLAGS, which
a library must not do (tests/tools/test_console_commands.py checks that nothing else imports it).
"""

import sys

from absl import flags


def adopt_help(module_name: str) -> None:
    """Makes absl's --help and --helpfull show the docstring and flags of the binary's module `module_name`.

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
    if module_name != sys.argv[0] and module_name in by_module:
        by_module.setdefault(sys.argv[0], []).extend(by_module.pop(module_name))
