"""`tft-translate` in a checkout: the binary is tf_transformer/cli/translate.py."""

from tf_transformer.cli.translate import run

if __name__ == "__main__":
    run()
