// tinyaxpy._tinyaxpy: the CPython binding (plain C API) over libtinyaxpy_kernels.so.
// Importing it loads the kernels library (and, on CUDA builds, libcudart) but makes
// no CUDA call; device errors surface as BackendError carrying the backend's text.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstring>
#include <vector>

#include "tinyaxpy.h"

namespace {

PyObject *g_backend_error = nullptr;

PyObject *raise_backend(const char *what, int code) {
  PyErr_Format(g_backend_error, "tinyaxpy: %s failed on the %s backend: %s (%d): %s", what,
               tinyaxpy_backend(), tinyaxpy_error_name(code), code, tinyaxpy_error_string(code));
  return nullptr;
}

// Reads a float32/float64 buffer or any sequence of numbers into `out`.
bool to_floats(PyObject *obj, const char *arg, std::vector<float> &out) {
  if (PyObject_CheckBuffer(obj)) {
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) != 0) return false;
    const char *fmt = view.format != nullptr ? view.format : "B";
    if (fmt[0] == '@' || fmt[0] == '=' || fmt[0] == '<') ++fmt;
    bool ok = true;
    const Py_ssize_t n = view.itemsize > 0 ? view.len / view.itemsize : 0;
    if (std::strcmp(fmt, "f") == 0 && view.itemsize == 4) {
      out.resize(static_cast<size_t>(n));
      if (n > 0) std::memcpy(out.data(), view.buf, static_cast<size_t>(view.len));
    } else if (std::strcmp(fmt, "d") == 0 && view.itemsize == 8) {
      out.resize(static_cast<size_t>(n));
      const double *src = static_cast<const double *>(view.buf);
      for (Py_ssize_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<float>(src[i]);
    } else {
      PyErr_Format(PyExc_TypeError, "%s: buffer format '%s' is not float32 or float64", arg,
                   view.format != nullptr ? view.format : "B");
      ok = false;
    }
    PyBuffer_Release(&view);
    return ok;
  }
  PyObject *seq = PySequence_Fast(obj, "expected a sequence of numbers or a float buffer");
  if (seq == nullptr) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject **items = PySequence_Fast_ITEMS(seq);
  out.resize(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    const double v = PyFloat_AsDouble(items[i]);
    if (v == -1.0 && PyErr_Occurred()) {
      Py_DECREF(seq);
      return false;
    }
    out[static_cast<size_t>(i)] = static_cast<float>(v);
  }
  Py_DECREF(seq);
  return true;
}

PyObject *py_saxpy(PyObject *, PyObject *args) {
  float a = 0.0f;
  PyObject *x_obj = nullptr, *y_obj = nullptr;
  if (!PyArg_ParseTuple(args, "fOO:saxpy", &a, &x_obj, &y_obj)) return nullptr;
  std::vector<float> x, y;
  if (!to_floats(x_obj, "x", x) || !to_floats(y_obj, "y", y)) return nullptr;
  if (x.size() != y.size()) {
    return PyErr_Format(PyExc_ValueError, "x and y differ in length: %zu != %zu", x.size(),
                        y.size());
  }
  int code = 0;
  Py_BEGIN_ALLOW_THREADS
  code = tinyaxpy_saxpy(a, x.data(), y.data(), y.data(), y.size());
  Py_END_ALLOW_THREADS
  if (code != 0) return raise_backend("saxpy", code);
  PyObject *result = PyList_New(static_cast<Py_ssize_t>(y.size()));
  if (result == nullptr) return nullptr;
  for (size_t i = 0; i < y.size(); ++i) {
    PyObject *f = PyFloat_FromDouble(static_cast<double>(y[i]));
    if (f == nullptr) {
      Py_DECREF(result);
      return nullptr;
    }
    PyList_SET_ITEM(result, static_cast<Py_ssize_t>(i), f);
  }
  return result;
}

PyObject *py_backend(PyObject *, PyObject *) { return PyUnicode_FromString(tinyaxpy_backend()); }

PyObject *py_runtime_version(PyObject *, PyObject *) {
  int version = 0;
  const int code = tinyaxpy_runtime_version(&version);
  if (code != 0) return raise_backend("runtime_version", code);
  return PyLong_FromLong(version);
}

PyObject *py_device_query(PyObject *, PyObject *) {
  char name[256] = {0};
  int major = 0, minor = 0;
  int code = 0;
  Py_BEGIN_ALLOW_THREADS
  code = tinyaxpy_device_query(name, sizeof name, &major, &minor);
  Py_END_ALLOW_THREADS
  if (code != 0) return raise_backend("device_query", code);
  return Py_BuildValue("(s(ii))", name, major, minor);
}

PyMethodDef methods[] = {
    {"saxpy", py_saxpy, METH_VARARGS, "saxpy(a, x, y) -> list[float]: a*x+y in float32."},
    {"backend", py_backend, METH_NOARGS, "backend() -> 'cuda' | 'cpu' (no device call)."},
    {"runtime_version", py_runtime_version, METH_NOARGS, "CUDA runtime version, 0 on cpu."},
    {"device_query", py_device_query, METH_NOARGS, "device_query() -> (name, (major, minor))."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_tinyaxpy", "tinyaxpy's native binding.", -1,
                          methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__tinyaxpy(void) {
  PyObject *m = PyModule_Create(&module_def);
  if (m == nullptr) return nullptr;
  g_backend_error = PyErr_NewException("tinyaxpy.BackendError", PyExc_RuntimeError, nullptr);
  if (g_backend_error == nullptr || PyModule_AddObject(m, "BackendError", g_backend_error) != 0) {
    Py_XDECREF(g_backend_error);
    Py_DECREF(m);
    return nullptr;
  }
  Py_INCREF(g_backend_error);  // the module's reference was stolen; keep ours
  return m;
}
