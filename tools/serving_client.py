"""`tft-serving-client` in a checkout: the binary is tf_transformer/cli/serving_client.py."""

from tf_transformer.cli.serving_client import run

if __name__ == "__main__":
    run()
