#!/usr/bin/env python3
"""usage: layout.py BASELINE.abi CURRENT.abi

The struct half of the ABI check (check.sh runs it after abidiff). The
suppression that lets abidiff accept a struct growing at the end
(has_data_member_inserted_at = end) also hides, in libabigail 2.2, a
member whose type or offset changed inside the struct -- measured: a
uint32_t field turned uint64_t passed. So every struct of the public
header is compared here member by member:

- every member of the baseline is still there, at the same offset, with
  the same type (named types by name, pointers and arrays spelled out);
- a struct whose first member is `struct_size` (the parameter and info
  structs, README "ABI") may grow, with new members only past its old
  end, and so may fx_event, whose size the host passes to fx_poll_sized
  instead (docs/abi.md); any other struct (fx_usage, fx_allocator, ...)
  keeps its size: the host allocates it and the library writes all of
  it, so a larger one would be written past the end of an older host's.

Exit 0 when the layouts are compatible, 1 with one line per problem.
"""
import sys
import xml.etree.ElementTree as ET

PUBLIC_HEADER = "ferrox.h"


def load(path):
    root = ET.parse(path).getroot()
    types = {}
    for el in root.iter():
        tid = el.get("id")
        if tid:
            types.setdefault(tid, el)
    structs = {}
    for el in root.iter("class-decl"):
        name = el.get("name")
        if (not name or el.get("is-declaration-only") == "yes"
                or not (el.get("filepath") or "").endswith(PUBLIC_HEADER)):
            continue
        structs.setdefault(name, el)
    return types, structs


def spell(types, tid, depth=0):
    """A type as text that does not depend on the corpus' type ids."""
    el = types.get(tid)
    if el is None or depth > 20:
        return "?" + str(tid)
    tag = el.tag
    if tag in ("type-decl", "typedef-decl", "enum-decl"):
        return el.get("name")
    if tag == "class-decl":
        return ("struct " if el.get("is-struct") == "yes" else "class ") + \
            (el.get("name") or "<anonymous>")
    if tag == "union-decl":
        return "union " + (el.get("name") or "<anonymous>")
    if tag == "pointer-type-def":
        return spell(types, el.get("type-id"), depth + 1) + " *"
    if tag == "qualified-type-def":
        quals = [q for q in ("const", "volatile", "restrict") if el.get(q) == "yes"]
        return " ".join(quals + [spell(types, el.get("type-id"), depth + 1)])
    if tag == "array-type-def":
        return "%s[%s bits]" % (spell(types, el.get("type-id"), depth + 1),
                                el.get("size-in-bits"))
    if tag == "function-type":
        params = [spell(types, p.get("type-id"), depth + 1)
                  for p in el.findall("parameter")]
        ret = el.find("return")
        r = spell(types, ret.get("type-id"), depth + 1) if ret is not None else "void"
        return "%s(%s)" % (r, ", ".join(params))
    return tag


def members(types, el):
    out = []
    for dm in el.findall("data-member"):
        var = dm.find("var-decl")
        if var is None:
            continue
        out.append((var.get("name"), int(dm.get("layout-offset-in-bits", "0")),
                    spell(types, var.get("type-id"))))
    return out


def main():
    if len(sys.argv) != 3:
        print(__doc__.splitlines()[0])
        return 2
    old_types, old = load(sys.argv[1])
    new_types, new = load(sys.argv[2])
    problems = []
    for name, o in sorted(old.items()):
        n = new.get(name)
        if n is None:
            problems.append("struct %s: gone from the public header" % name)
            continue
        om, nm = members(old_types, o), members(new_types, n)
        osize, nsize = int(o.get("size-in-bits", "0")), int(n.get("size-in-bits", "0"))
        grows = (bool(om) and om[0][0] == "struct_size") or name == "fx_event"
        bynew = {m[0]: m for m in nm}
        for mname, off, ty in om:
            got = bynew.get(mname)
            if got is None:
                problems.append("struct %s: member %s removed or renamed" % (name, mname))
            elif got[1] != off:
                problems.append("struct %s: member %s moved from bit %d to %d"
                                % (name, mname, off, got[1]))
            elif got[2] != ty:
                problems.append("struct %s: member %s changed type from %s to %s"
                                % (name, mname, ty, got[2]))
        oldnames = {m[0] for m in om}
        for mname, off, ty in nm:
            if mname in oldnames:
                continue
            if not grows:
                problems.append("struct %s: member %s added, but the struct has "
                                "no struct_size, so it may not grow" % (name, mname))
            elif off < osize:
                # Inside the old size (in its tail padding, say): an older
                # caller's struct_size covers it, so the library would take
                # that caller's padding for this field's value.
                problems.append("struct %s: member %s at bit %d is inside the "
                                "old size (%d bits), where an older caller's "
                                "struct_size covers it; add explicit padding "
                                "first" % (name, mname, off, osize))
        if nsize < osize or (nsize != osize and not grows):
            problems.append("struct %s: size changed from %d to %d bits"
                            % (name, osize, nsize))
    for p in problems:
        print(p)
    if not old:
        print("no public struct found in %s" % sys.argv[1])
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
