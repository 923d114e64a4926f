"""Building composite layers: each sublayer is built once, whoever builds it first."""


def build_sublayer(layer, *shapes):
    """Builds `layer` for `shapes` unless it is built already (e.g. called on its own before its parent)."""
    if layer is not None and not layer.built:
        layer.build(*shapes)
