"""`tft-demo` in a checkout: the binary is tf_transformer/cli/demo.py."""

from tf_transformer.cli.demo import run

if __name__ == "__main__":
    run()
