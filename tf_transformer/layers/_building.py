"""Building composite layers: each sublayer is built once, whoever builds it first."""


def build_sublayer(layer, *shapes):
    """Builds `layer` for `shapes` unless it is built already (e.g. called on its own before its parent)."""
    if layer is not None and not layer.built:
        layer.build(*shapes)


def build_for_fit(model):
    """Builds a compiled model's weights and its optimizer's variables before its training step is traced.

    Without a distribution strategy Keras builds them inside the first trace of the training step, and a
    traced function whose first call creates variables is traced twice; built here, `fit` traces its step once.
    """
    optimizer = getattr(model, "optimizer", None)  # absent or None until `compile`: nothing to build for yet
    if optimizer is None:
        return
    if not model.built:
        model.build()
    if not optimizer.built:
        optimizer.build(model.trainable_variables)
