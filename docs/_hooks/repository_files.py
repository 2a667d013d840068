"""MkDocs hook: the repository's generated results, served with the site.

The pages link to a result by its path in the repository, relative to the page
(`../../results/paper_tables/table3.md` from `docs/results/paper-tables.md`), so
the same link works on the site and when the page is read in the repository.
MkDocs resolves a link against the site's files, so every file under the
folders of `FOLDERS` is added with its path relative to `docs/` as its source
(`../results/paper_tables/table3.md`) and written under `files/` in the site:
a link to a file that does not exist still fails `mkdocs build --strict`.
Markdown files among them become pages (outside the navigation); the rest are
copied as they are. A folder's `README.md` is left out: it guides readers of
the repository to the site's pages, which the site has anyway.
"""

import os

from mkdocs.structure.files import File, InclusionLevel

__all__ = ["FOLDERS", "on_files"]

FOLDERS = ("results",)  # relative to the folder of mkdocs.yml


def on_files(files, config):
    """Adds every file of `FOLDERS` (dot files and `README.md` aside) to the site's files."""
    root = os.path.dirname(os.path.abspath(config.config_file_path))
    for folder in FOLDERS:
        for directory, subdirectories, names in os.walk(os.path.join(root, folder)):
            subdirectories[:] = sorted(d for d in subdirectories if not d.startswith("."))
            for name in sorted(n for n in names if not n.startswith(".") and n != "README.md"):
                path = os.path.join(directory, name)
                in_repository = os.path.relpath(path, root).replace(os.sep, "/")
                placed = File(in_repository, root, config.site_dir, config.use_directory_urls)
                files.append(
                    File(
                        os.path.relpath(path, config.docs_dir).replace(os.sep, "/"),
                        config.docs_dir,
                        config.site_dir,
                        config.use_directory_urls,
                        dest_uri="files/" + placed.dest_uri,
                        inclusion=InclusionLevel.NOT_IN_NAV,
                    )
                )
    return files
