"""Small helpers every stage shares: credentials and their redaction (``credentials``), atomic writes and
file digests (``fs``), advisory file locks (``oslock``), a set of files committed as one through a redo journal
(``journal``), scratch directories that a killed run leaves no trace of (``scratch``), the one subprocess runner
(``runner``), Slurm's commands through it (``slurm``), the data tables under ``rocmlock/data`` (``tables``) and
TOML/text odds and ends (``toml``, ``text``), YAML and JSON written as PyYAML's ``safe_dump`` and ``json.dumps``
write them, faster (``yamlwrite``, ``jsonwrite``), and a gzip writer that compresses on several threads (``pgzip``). Nothing here knows what a workspace, a lock or a GPU is.

May import: rocmlock.errors.
"""
