"""`tft-build-vocab` in a checkout: the binary is tf_transformer/cli/build_vocab.py."""

from tf_transformer.cli.build_vocab import run

if __name__ == "__main__":
    run()
