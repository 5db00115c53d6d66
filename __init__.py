"""Not part of the package. A clone of ldr in a folder named `ldr`, imported from the folder above
it (`python script.py` beside the clone), would be an empty namespace package that shadows the
installed one (`ldr.Index` missing): this file makes it the package inside, ldr/ldr. Imported under
any other name (pytest imports a test root's __init__.py as the folder's package, or as
`__init__` where the folder's name is no identifier: `ldr-main`), it does nothing."""
if __name__ == "ldr":
    import os as _os

    __path__ = [_os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "ldr")]
    _init = _os.path.join(__path__[0], "__init__.py")
    with open(_init, encoding="utf-8") as _f:
        exec(compile(_f.read(), _init, "exec"))
    del _f, _init
