"""`tft-average-checkpoints` in a checkout: the binary is tf_transformer/cli/average_checkpoints.py."""

from tf_transformer.cli.average_checkpoints import run

if __name__ == "__main__":
    run()
