"""`h3kit uninstall`: remove exactly what h3kit installed, nothing else (the step is h3kit.steps.uninstall)."""

from __future__ import annotations

from h3kit.cli.context import Context, Outcome, add_comfyui_target, comfyui_target
from h3kit.core.errors import EXIT_VERIFY_FAILED
from h3kit.steps import uninstall
from h3kit.steps.options import UninstallOptions

HELP = "remove exactly what h3kit installed, nothing else"


def add_arguments(p) -> None:
    add_comfyui_target(p, "the ComfyUI folder h3kit was installed into", " (not needed to uninstall)")
    p.add_argument("--purge", action="store_true", help="also remove config, cache, reports and h3kit's own venv")


def run(args, ctx: Context) -> Outcome:
    return render(uninstall.run(UninstallOptions(comfyui=comfyui_target(args), purge=args.purge), ctx))


def render(doc: dict) -> Outcome:
    if doc.get("cancelled"):
        return Outcome(doc, "Nothing removed.")
    if "problem" in doc:  # no record, --dry-run: what h3kit's names would match
        return Outcome(doc, f"{doc['problem']}\nWithout a record h3kit removes nothing. These are h3kit's names in "
                            "this ComfyUI:\n" + ("\n".join(f"  {p}" for p in doc["would_remove"]) or "  (none found)"))
    if "record" in doc:  # no record: only an interrupted install's staging folders went
        return Outcome(doc, f"h3kit has no install record for {doc['comfyui']}; nothing else of h3kit's is there."
                       + "".join(f"\nRemoved the staging folder an interrupted install left: {p}"
                                 for p in doc["staging_cleaned"]))
    dry_run = doc["dry_run"]
    lines = [f"{'Would remove' if dry_run else 'Removed'} {len(doc['removed'])} files and folders h3kit installed "
             f"in {doc['comfyui']}."]
    lines += [f"  {'would remove' if dry_run else 'removed'} the staging folder an interrupted install left: {p}"
              for p in doc["staging_cleaned"]]
    lines += [f"  moved to backup (changed or added by you): {b['path']} -> {b['backup']}" for b in doc["backed_up"]]
    lines += [f"  kept: {k['path']} ({k['why']})" for k in doc["kept"]]
    lines += [f"  purged: {p}" for p in doc["purged"]]
    lines += [f"  undone (doctor --fix): {n}" for n in doc["torch"]]
    comfyui_purge = doc["comfyui_purge"]
    if comfyui_purge and comfyui_purge.get("removed"):
        lines.append(f"  removed the ComfyUI h3kit created: {comfyui_purge['removed']}")
        lines += [f"  kept your files in {k}" for k in comfyui_purge.get("kept", [])]
    if doc["behind_links"]:
        links = sorted({b["link"] for b in doc["behind_links"]})
        lines.append(f"Left {len(doc['behind_links'])} recorded files alone because {', '.join(links)} "
                     "is now a link to somewhere else; h3kit never follows links. Remove the link yourself if "
                     "you want, then run uninstall again.")
        return Outcome(doc, "\n".join(lines), EXIT_VERIFY_FAILED)
    return Outcome(doc, "\n".join(lines))
