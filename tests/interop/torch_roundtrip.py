#!/usr/bin/env python3
"""Tensors exchanged between gradix and PyTorch through DLPack, with no copy.

usage: torch_roundtrip.py LIBRARY   (the shared library built from dlpack_ctypes.cpp)

- PyTorch -> gradix: a float32 matrix's DLPack capsule goes to gradix, which doubles it in
  place; the tensor changes and gradix wrote at the tensor's own data pointer. A transposed
  (strided) view, a float64 vector, bfloat16 and float16 vectors (read as float) too, and a
  tensor of the wrong type is refused.
- gradix -> PyTorch: gradix exports a row-major and a column-major tensor; torch's
  from_dlpack sees the same data pointer, the values and the layout's strides, and frees it
  through gradix's deleter once.
Exits 77 (skipped) when torch cannot be imported by this interpreter.
"""
import ctypes
import gc
import sys

try:
    import torch
    import torch.utils.dlpack
except ImportError:
    print("torch_roundtrip: no torch for", sys.executable, "(python3-torch): skipped")
    sys.exit(77)

lib = ctypes.CDLL(sys.argv[1])
lib.gx_double_in_place.restype = ctypes.c_size_t
lib.gx_double_in_place.argtypes = [ctypes.c_void_p]
lib.gx_sum.restype = ctypes.c_double
lib.gx_sum.argtypes = [ctypes.c_void_p]
lib.gx_sum_half.restype = ctypes.c_double
lib.gx_sum_half.argtypes = [ctypes.c_void_p, ctypes.c_int]
lib.gx_make.restype = ctypes.c_void_p
lib.gx_make.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int]
lib.gx_data_of.restype = ctypes.c_size_t
lib.gx_data_of.argtypes = [ctypes.c_void_p]
lib.gx_exported_freed.restype = ctypes.c_int

get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
get_pointer.restype = ctypes.c_void_p
get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
new_capsule = ctypes.pythonapi.PyCapsule_New
new_capsule.restype = ctypes.py_object
new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

failures = 0


def check(ok, what):
    global failures
    print(("ok:     " if ok else "FAILED: ") + what)
    if not ok:
        failures += 1


def dltensor(t):
    """The DLTensor* of t's DLPack capsule (the capsule, kept alive by the caller, owns it)."""
    cap = torch.utils.dlpack.to_dlpack(t)
    return cap, get_pointer(cap, b"dltensor")


# PyTorch -> gradix, in place
a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
want = a * 2
cap, p = dltensor(a)
wrote = lib.gx_double_in_place(p)
check(wrote == a.data_ptr(), f"gradix wrote at torch's data pointer ({wrote:#x}, torch {a.data_ptr():#x})")
check(torch.equal(a, want), "the torch tensor was doubled in place")
del cap

# a strided (transposed) view of it
at = a.t()
cap, p = dltensor(at)
want = at * 2
lib.gx_double_in_place(p)
check(torch.equal(at, want) and torch.equal(a, want.t()), "a transposed view: doubled through its strides")
del cap

v = torch.linspace(0, 1, 101, dtype=torch.float64)
cap, p = dltensor(v)
check(abs(lib.gx_sum(p) - float(v.sum())) < 1e-12, "the sum of a float64 vector")
del cap

for dt, code, name in ((torch.bfloat16, 0, "bfloat16"), (torch.float16, 1, "float16")):
    h = (torch.linspace(-3, 3, 77, dtype=torch.float32) ** 3).to(dt)
    cap, p = dltensor(h)
    check(abs(lib.gx_sum_half(p, code) - float(h.to(torch.float64).sum())) < 1e-9, f"the sum of a {name} vector (read as float)")
    other = lib.gx_sum_half(p, 1 - code)
    check(other != other, f"a {name} tensor is refused as the other 16-bit type")
    del cap

i = torch.arange(6, dtype=torch.int64).reshape(2, 3)
cap, p = dltensor(i)
check(lib.gx_double_in_place(p) == 0 and torch.equal(i, torch.arange(6).reshape(2, 3)),
      "an int64 tensor is refused, unchanged")
del cap

# gradix -> PyTorch
for col_major in (0, 1):
    m = lib.gx_make(3, 5, col_major)
    data = lib.gx_data_of(m)
    t = torch.utils.dlpack.from_dlpack(new_capsule(m, b"dltensor", None))
    layout = "column-major" if col_major else "row-major"
    check(t.data_ptr() == data, f"{layout}: torch reads gradix's memory ({t.data_ptr():#x}, gradix {data:#x})")
    want = torch.arange(15, dtype=torch.float32).reshape(3, 5)  # iota counts in logical order
    check(torch.equal(t, want), f"{layout}: the values, shape {tuple(t.shape)}")
    check(t.stride() == ((1, 3) if col_major else (5, 1)), f"{layout}: strides {t.stride()}")
    freed = lib.gx_exported_freed()
    del t
    gc.collect()
    check(lib.gx_exported_freed() == freed + 1, f"{layout}: torch freed it through gradix's deleter, once")

print(f"torch_roundtrip: torch {torch.__version__}, {failures} failed")
sys.exit(1 if failures else 0)
