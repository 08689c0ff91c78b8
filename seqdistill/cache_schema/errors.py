"""Errors raised by the cache layer. Every message names the file, shard or field at fault
and says what to do about it."""


class CacheError(Exception):
    """Base class: anything wrong with a cache or with a request made of it."""


class ManifestError(CacheError):
    """The manifest is missing, malformed, unsafe or of an unsupported format version."""


class FormatVersionError(ManifestError):
    """The cache was written in a format version this code does not read."""


class FieldError(CacheError):
    """A field spec or the data offered for a field is invalid."""


class FingerprintMismatchError(CacheError):
    """A layer already in the cache was produced by a different teacher or corpus."""


class ShardError(CacheError):
    """A shard is missing, incomplete or does not match the manifest."""


class CacheLockedError(CacheError):
    """Another build holds the cache's lock (``build.lock``)."""
