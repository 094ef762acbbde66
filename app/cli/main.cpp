// fulcrum: the command line of Fulcrum.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"

int main(int argc, char** argv) {
    using namespace fulcrum::cli;
    CLI::App app{
        "Fulcrum: shows where 4D-parallel LLM training loses time to workload "
        "imbalance.\n\nExit status: 0 success, 2 error (bad input or file), 3 output "
        "shown but the run is incomplete.",
        "fulcrum"};
    app.set_version_flag("--version", "fulcrum " FULCRUM_VERSION);
    app.require_subcommand(1);

    struct Entry {
        CLI::App* sub;
        Command run;
    };
    std::vector<Entry> commands;
    auto add = [&](Command (*make)(CLI::App&)) {
        const std::size_t before = app.get_subcommands({}).size();
        Command run = make(app);
        commands.push_back({app.get_subcommands({})[before], std::move(run)});
    };
    add(add_info_command);
    add(add_merge_command);
    add(add_export_command);
    add(add_capture_command);
    add(add_analyze_command);
    add(add_diff_command);
    add(add_simulate_command);
    add(add_plan_command);
    add(add_report_command);
    add(add_import_command);

    // CLI11 would only say "a subcommand is required" for a misspelt one.
    if (argc > 1 && argv[1][0] != '-') {
        const std::string name = argv[1];
        bool known = false;
        std::string names;
        for (const auto& command : commands) {
            known |= command.sub->get_name() == name;
            names += (names.empty() ? "" : ", ") + command.sub->get_name();
        }
        if (!known) {
            std::fprintf(stderr,
                         "fulcrum: error: unknown command '%s' (commands: %s; see "
                         "fulcrum --help)\n",
                         name.c_str(), names.c_str());
            return kExitError;
        }
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        app.exit(e);
        return kExitError;
    }
    install_interrupt_handler();
    for (auto& command : commands) {
        if (command.sub->parsed()) {
            return command.run();
        }
    }
    return kExitError;
}
