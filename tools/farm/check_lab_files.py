"""Checks a labgrid exporter file and environment file against the labgrid that is installed,
without any hardware: every resource and driver class exists, every argument given is one the
class takes, every power model is one labgrid ships, and the environment's places carry the
options `barebench farm` reads. Prints one line per problem and exits 1 if there was one.

    python tools/farm/check_lab_files.py --exporter exporter.yaml --env lab.yaml

Run it with the Python of labgrid's virtual environment (`make deps` makes
~/.cache/barebench/labgrid-venv). docs/farm.md §3's files are checked by the end-to-end test
`the_pi_lab_files_in_docs_farm_name_only_what_labgrid_has` (tools/tests/e2e/farm.rs).
"""

import argparse
import contextlib
import importlib.util
import io
import os
import socket
import sys

import attr

# labgrid's NetworkPowerPort `model` names a module of labgrid.driver.power.
POWER_MODEL_PACKAGE = "labgrid.driver.power"
# The per-place options `barebench farm` reads (tools/farm/labgrid_place.py).
PLACE_OPTIONS = {"barebench_settings": str, "barebench_timeout": (int, float)}
# Exporter-only keys of a resource entry (labgrid/remote/exporter.py), not class arguments.
EXPORTER_KEYS = {"cls"}


def argument_names(cls):
    return {field.name for field in attr.fields(cls) if field.init}


def check_arguments(where, cls, arguments, problems):
    if not isinstance(arguments, dict):
        return
    unknown = sorted(set(arguments) - argument_names(cls) - EXPORTER_KEYS)
    for name in unknown:
        problems.append(f"{where}: {cls.__name__} takes no argument {name!r}")


def check_power_model(where, arguments, problems):
    model = (arguments or {}).get("model")
    if model is None:
        return
    # Found, not imported: some models need an extra (poe_mib needs labgrid[snmp]'s pysnmp).
    if importlib.util.find_spec(f"{POWER_MODEL_PACKAGE}.{model}") is None:
        problems.append(f"{where}: power model {model!r} is not one labgrid has")


def exporter_template_env():
    # What labgrid-exporter gives its template (labgrid/remote/exporter.py main).
    return {"env": os.environ, "isolated": False, "hostname": socket.gethostname(), "name": "check"}


def check_exporter(path, problems):
    from labgrid.factory import target_factory
    from labgrid.remote.config import ResourceConfig

    # ResourceConfig prints the rendered template and what it loaded; only the problems count.
    with contextlib.redirect_stdout(io.StringIO()):
        groups = ResourceConfig(path, template_env=exporter_template_env()).data
    for group_name, group in groups.items():
        for resource_name, arguments in (group or {}).items():
            class_name = (arguments or {}).get("cls", resource_name)
            where = f"{path}: {group_name}/{resource_name}"
            cls = target_factory.resources.get(class_name)
            if cls is None:
                problems.append(f"{where}: no labgrid resource {class_name!r}")
                continue
            check_arguments(where, cls, arguments, problems)
            check_power_model(where, arguments, problems)
    return sorted(groups)


def check_target(path, target_name, target, problems):
    from labgrid.factory import target_factory

    for kind, registry in (("resources", target_factory.resources), ("drivers", target_factory.drivers)):
        for class_name, arguments in ((target or {}).get(kind) or {}).items():
            where = f"{path}: {target_name}/{kind}/{class_name}"
            cls = registry.get(class_name)
            if cls is None:
                problems.append(f"{where}: no labgrid {kind[:-1]} {class_name!r}")
                continue
            check_arguments(where, cls, arguments, problems)
    for option, value in (((target or {}).get("options")) or {}).items():
        wanted = PLACE_OPTIONS.get(option)
        if wanted is not None and not isinstance(value, wanted):
            problems.append(f"{path}: {target_name}: option {option} is {value!r}, not a {wanted}")


def check_environment(path, exported_places, problems):
    from labgrid.config import Config

    config = Config(path)
    for target_name, target in config.get_targets().items():
        check_target(path, target_name, target, problems)
        place = (((target or {}).get("resources") or {}).get("RemotePlace") or {}).get("name")
        if exported_places is not None and place not in exported_places:
            problems.append(f"{path}: {target_name}: place {place!r} is no group of the exporter file")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exporter")
    parser.add_argument("--env")
    args = parser.parse_args()
    problems = []
    exported_places = check_exporter(args.exporter, problems) if args.exporter else None
    if args.env:
        check_environment(args.env, exported_places, problems)
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
