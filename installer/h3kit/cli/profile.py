"""`h3kit profile`: list, explain or select optimization profiles (list | show NAME | use NAME)."""

from __future__ import annotations

from h3kit.cli.context import Context, Outcome
from h3kit.core.errors import BadInput
from h3kit.data import catalog as catalog_mod
from h3kit.data import config as config_mod

HELP = "list, explain or select optimization profiles (list | show NAME | use NAME)"


def add_arguments(p) -> None:
    p.add_argument("action", choices=["list", "show", "use"], help="list profiles, explain one, or select one")
    p.add_argument("name", nargs="?", metavar="NAME", help="profile name (for show and use; 'auto' for use)")


def _describe(profile) -> dict:
    return {"name": profile.name, "description": profile.description, "file": str(profile.path),
            "match": dict(profile.written_match), "settings": dict(profile.written), "notes": profile.notes}


def run(args, ctx: Context) -> Outcome:
    cat = catalog_mod.load()
    profiles = catalog_mod.load_profiles(cat)
    names = ", ".join(profiles)
    if args.action == "list":
        cfg = config_mod.load(ctx.locations, catalog=cat, profile_names=list(profiles))
        doc = {"schema": "h3kit.profiles/1", "selected": cfg.profile,
               "profiles": [{"name": p.name, "description": p.description} for p in profiles.values()]}
        text = "\n".join(f"{'*' if p.name == cfg.profile else ' '} {p.name:24} {p.description}" for p in profiles.values())
        return Outcome(doc, text + f"\n(selected: {cfg.profile}; change with 'h3kit profile use NAME')")
    if not args.name:
        raise BadInput(f"'h3kit profile {args.action}' needs a profile name.", f"Choose one of: {names}.")
    if args.name not in profiles and not (args.action == "use" and args.name == "auto"):
        raise BadInput(f"There is no profile named {args.name!r}.", f"Choose one of: {names}" +
                       (" (or auto)." if args.action == "use" else "."))
    if args.action == "show":
        d = _describe(profiles[args.name])
        text = [f"{d['name']}: {d['description']}", f"file: {d['file']}", f"match: {d['match']}"]
        text += [f"  {k}: {v}" for k, v in d["settings"].items()]
        if d["notes"]:
            text.append(f"notes: {d['notes']}")
        return Outcome({"schema": "h3kit.profile/1", **d}, "\n".join(text))
    path = ctx.locations.config_file
    cfg = config_mod.load(ctx.locations, catalog=cat, profile_names=list(profiles))
    doc = {"schema": "h3kit.profile-use/1", "config": str(path), "previous": cfg.profile, "profile": args.name,
           "changed": cfg.profile != args.name, "dry_run": ctx.dry_run}
    if ctx.dry_run:
        return Outcome(doc, f"would set profile: {args.name} in {path} (now {cfg.profile})")
    if cfg.profile != args.name or not path.exists():
        config_mod.set_value(path, "profile", args.name)
    return Outcome(doc, f"profile: {args.name} written to {path} (was {cfg.profile}); the next 'h3kit plan' uses it.")
