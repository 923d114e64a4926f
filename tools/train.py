"""`tft-train` in a checkout: the binary is tf_transformer/cli/train.py."""

from tf_transformer.cli.train import run

if __name__ == "__main__":
    run()
