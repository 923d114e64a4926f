"""`tft-plot-attention` in a checkout: the binary is tf_transformer/cli/plot_attention.py."""

from tf_transformer.cli.plot_attention import run

if __name__ == "__main__":
    run()
