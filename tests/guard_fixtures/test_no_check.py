"""One test that checks nothing: it only prints, and so does its helper."""


def _show(x):
    print(x)


def test_prints_only():
    _show(2 + 2)
