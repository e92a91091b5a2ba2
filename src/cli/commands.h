// The subcommands of `spillway`: each registers its options on the parser
// and runs when chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace spillway::cli {

using Runner = std::function<int()>;

// "spillway 0.6.0 (commit abc1234, CUDA)": what --version prints.
std::string version_text();

Runner add_train(CLI::App& app);
Runner add_finetune(CLI::App& app);
Runner add_generate(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_plan(CLI::App& app);
Runner add_convert(CLI::App& app);
Runner add_eval(CLI::App& app);
Runner add_serve(CLI::App& app);
Runner add_chat(CLI::App& app);

}  // namespace spillway::cli
