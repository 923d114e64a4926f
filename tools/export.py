"""`tft-export` in a checkout: the binary is tf_transformer/cli/export.py."""

from tf_transformer.cli.export import run

if __name__ == "__main__":
    run()
