"""`tft-evaluate` in a checkout: the binary is tf_transformer/cli/evaluate.py."""

from tf_transformer.cli.evaluate import run

if __name__ == "__main__":
    run()
