"""`tft-demo` in a checkout: the binary is tf_transformer/cli/demo.py."""

import pathlib
import sys

# Python puts this script's folder, tools/, first on sys.path, not the checkout: without this line the import
# below would take whatever tf_transformer is installed (another version), or fail.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from tf_transformer.cli.demo import run

if __name__ == "__main__":
    run()
