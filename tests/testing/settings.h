// A scratch folder for tests of settings files: writing one, and the
// one-line error of reading it without the folder's name.
#pragma once

#include <fstream>
#include <string>

#include "base/status.h"
#include "testing/files.h"

namespace spillway::testing {

class SettingsTest : public TempDirTest {
 protected:
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(file(name), std::ios::binary) << text;
    return file(name);
  }
  // The message of what `run` throws, with the scratch folder cut from the
  // path it starts with; "no error" when it throws none.
  template <typename F>
  std::string error_of(F&& run) const {
    try {
      run();
    } catch (const Error& e) {
      const std::string what = e.what();
      return what.rfind(dir_ + "/", 0) == 0 ? what.substr(dir_.size() + 1) : what;
    }
    return "no error";
  }
};

}  // namespace spillway::testing
