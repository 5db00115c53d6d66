"""Not part of the package. A clone of ldr in a folder named `ldr`, imported from the folder above
it (`python script.py` beside the clone), would be an empty namespace package that shadows the
installed one (`ldr.Index` missing): this file makes it the package inside, ldr/ldr."""
import os as _os

__path__ = [_os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "ldr")]
_init = _os.path.join(__path__[0], "__init__.py")
with open(_init, encoding="utf-8") as _f:
    exec(compile(_f.read(), _init, "exec"))
del _f, _init
