"""`tft-score` in a checkout: the binary is tf_transformer/cli/score.py."""

from tf_transformer.cli.score import run

if __name__ == "__main__":
    run()
