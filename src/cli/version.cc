#include <string>

#include "cli/commands.h"

namespace spillway::cli {

std::string version_text() {
  std::string text = "spillway " SPILLWAY_VERSION;
  const std::string commit = SPILLWAY_COMMIT;
  if (!commit.empty()) text += " (commit " + commit + ")";
#ifdef SPILLWAY_HAS_CUDA
  text += ", CUDA";
#else
  text += ", CPU only";
#endif
  return text;
}

}  // namespace spillway::cli
