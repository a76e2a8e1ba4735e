"""An argument nothing reads (vulture reports it at 100% confidence)."""


def scale(x, unused_factor):
    return 2 * x
