// The subcommands of `spillway`: each registers its options on the parser
// and runs when chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace spillway::cli {

using Runner = std::function<int()>;

Runner add_train(CLI::App& app);
Runner add_finetune(CLI::App& app);
Runner add_generate(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_plan(CLI::App& app);
Runner add_convert(CLI::App& app);

}  // namespace spillway::cli
