"""Who defines what and who calls what, read from a build's object files with nm: the part of the
layering that #include lines cannot show (tests/layering_test.py checks the rules over both).

An object file's undefined symbols are the functions and data it uses from other files; the one
object file that defines a symbol (a strong definition: code, data, read-only data) is the file it
calls. A weak definition counts when one file alone makes it and it is a template's instantiation
(from_vector<int64_t> in core/creation.cpp); inline functions, made in every object that uses
them (or in one, where an unoptimised build leaves them out of line), belong to their header, which
the include rules check. The objects read are those of the
library and the trainer (CMake targets ember_objects, ember, ember_imdb_objects, imdb); each names
its source: CMakeFiles/<target>.dir/<source path>.o."""
import pathlib
import subprocess

TARGETS = ("ember_objects", "ember", "ember_imdb_objects", "imdb")
STRONG = set("TDRBu")  # nm's types of a definition made once: text, data, read-only, bss, unique
WEAK = set("WV")


def object_files(root, build):
    """{source path: its object file} of the library's and the trainer's sources."""
    objects = {}
    for target in TARGETS:
        folder = build / "CMakeFiles" / f"{target}.dir"
        for obj in sorted(folder.rglob("*.o")):
            source = str(obj.relative_to(folder))[:-len(".o")]
            if (root / source).is_file():
                objects[source] = obj
    return objects


def demangle(names):
    """{mangled: readable} through c++filt, one process for all."""
    names = sorted(names)
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.splitlines()))


def symbol_table(objects):
    """(defined, used): {source: set of mangled names it defines / leaves undefined}."""
    by_object = {str(obj): source for source, obj in objects.items()}
    defined = {source: set() for source in objects}
    weak = {}
    used = {source: set() for source in objects}
    listing = subprocess.run(["nm", "-P", "-A", *by_object], capture_output=True, text=True, check=True).stdout
    for line in listing.splitlines():
        where, _, rest = line.partition(": ")
        fields = rest.split()
        if len(fields) < 2 or where not in by_object:
            continue
        name, kind = fields[0], fields[1]
        source = by_object[where]
        if kind == "U":
            used[source].add(name)
        elif kind in STRONG:
            defined[source].add(name)
        elif kind in WEAK:
            weak.setdefault(name, set()).add(source)
    strong = set().union(*defined.values())
    # Only a template's instantiation: an inline function left out of line in one object (at -O0 or -O1, as
    # the sanitizer build compiles) is its header's, wherever the compiler happened to emit it.
    readable = demangle(weak)
    for name, sources in weak.items():
        if len(sources) == 1 and name not in strong and "<" in readable[name].split("(")[0]:
            defined[sources.pop()].add(name)
    return defined, used


def calls(root, build):
    """(objects, definitions, edges): the sources read, {source: readable names it defines} and
    {(caller, callee): sorted readable names the caller uses from the callee}."""
    objects = object_files(root, build)
    defined, used = symbol_table(objects)
    definer = {}
    for source, names in defined.items():
        for name in names:
            definer.setdefault(name, []).append(source)
    readable = demangle(set().union(*defined.values(), *used.values()))
    edges = {}
    for caller, names in used.items():
        for name in names:
            for callee in definer.get(name, []):
                if callee != caller:
                    edges.setdefault((caller, callee), set()).add(readable[name])
    definitions = {source: {readable[n] for n in names} for source, names in defined.items()}
    return objects, definitions, {edge: sorted(names) for edge, names in edges.items()}
