// A CPython module (no pybind11: it compiles in seconds) that uses libc10 like any torch extension.
#include <Python.h>

#include <string>

#include <c10/core/Device.h>

static PyObject *device(PyObject *, PyObject *) {
  std::string name = c10::Device("cpu").str();  // a libc10 symbol
  return PyUnicode_FromString(name.c_str());
}

static PyObject *scale(PyObject *, PyObject *args) {
  double x, a;
  if (!PyArg_ParseTuple(args, "dd", &x, &a)) return nullptr;
  return PyFloat_FromDouble(x * a);
}

static PyMethodDef methods[] = {{"scale", scale, METH_VARARGS, "x * a"},
                                {"device", device, METH_NOARGS, "c10's name of the CPU device"},
                                {nullptr, nullptr, 0, nullptr}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
