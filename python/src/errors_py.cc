// Failures reach Python as exceptions carrying the one line the command
// line prints after "spillway: " (a file or flag, then the problem).
#include <nanobind/nanobind.h>

#include <exception>
#include <new>
#include <stdexcept>

#include "base/error_text.h"
#include "base/status.h"
#include "python/src/bindings.h"

namespace nb = nanobind;

namespace spillway::python {

namespace {
// spillway.Error; a module attribute keeps it alive, so this borrows it.
PyObject* g_error_type = nullptr;
}  // namespace

void bind_errors(nb::module_& m) {
  nb::exception<Error> error(m, "Error", PyExc_RuntimeError);
  error.attr("__doc__") =
      "A spillway failure: str(e) is one line naming the file, setting or value and the problem.";
  g_error_type = error.ptr();
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const nb::python_error&) {
      throw;  // a Python exception passing through the library: itself
    } catch (const nb::builtin_exception&) {
      throw;  // nanobind's own (StopIteration, TypeError, ...)
    } catch (const nb::cast_error&) {
      throw;
    } catch (const std::bad_alloc&) {
      PyErr_SetString(PyExc_MemoryError, escaped_error_text(p, "spillway").c_str());
    } catch (const std::length_error&) {
      PyErr_SetString(PyExc_MemoryError, escaped_error_text(p, "spillway").c_str());
    } catch (const std::exception&) {
      PyErr_SetString(g_error_type, escaped_error_text(p, "spillway").c_str());
    }
  });
}

}  // namespace spillway::python
