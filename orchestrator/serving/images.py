"""Which image each Docker-launched stack config runs, read from the Docker engine: its registry digest (after
an optional pull of the tag: the nightly's refresh), its image id, its release version and release-notes link.
The version is the tag's (stackspec.ReleaseNotes.version_of); a floating tag (`latest`) falls back on the
image's version label only where it looks like a release of that stack, else the version is unknown (None).

A morning regression should name the release that caused it, so each record carries the digest the previous
night ran (`old_digest`, from that run's manifest, else the digest stacks/*.yaml pins) beside tonight's. Nothing
is invented: an image the engine cannot resolve (no registry reachable, not pulled, no engine at all) is
recorded as `unresolved` with the engine's reason, and a locally built image (no registry) is `local_build`
with its image id, never a made-up digest.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel

from orchestrator.core.runcontract import ImageStatus
from orchestrator.serving.stackspec import Host, ImageRef, StackSpec

VERSION_LABEL = "org.opencontainers.image.version"  # the OCI annotation images carry their release in


class EngineImage(Protocol):
    id: str
    attrs: dict[str, Any]
    labels: dict[str, str]


class ImageRecord(BaseModel):
    stack: str
    host: str
    image: str  # repository:tag as the stack (or the matrix's override) names it
    repository: str
    tag: str
    pinned_digest: str | None  # what stacks/*.yaml pins (the run uses the pin when there is one)
    old_digest: str | None = None  # what the previous night ran (digest, or image id of a local build)
    old_source: str | None = None  # "previous run" | "stacks pin" | None
    new_digest: str | None = None  # the registry digest the tag resolves to now (pinned: differs -> re-pin available)
    image_id: str | None = None
    version: str | None = None  # the release: the tag's, else a version label that matches the stack's pattern
    version_label: str | None = None  # the image's org.opencontainers.image.version as is (often the base OS's)
    release_notes: str | None = None
    status: ImageStatus
    reason: str | None = None  # why unresolved, or what a local build is
    refreshed: bool = False  # the tag was pulled just now

    @property
    def identity(self) -> str | None:
        """What tells two nights' images apart: the image the run used: its pin, else the registry digest its tag
        resolved to, else (a local build) the image id."""
        return self.pinned_digest or self.new_digest or self.image_id

    @property
    def changed(self) -> bool | None:
        """Tonight's image differs from the previous night's; None when either side is unknown."""
        if self.old_digest is None or self.identity is None:
            return None
        return self.old_digest != self.identity


def split_reference(reference: str) -> tuple[str, str]:
    """repository, tag of `repo[:tag]` (a registry host's port is not a tag); `latest` when none is given."""
    repository, _, tag = reference.rpartition(":")
    if not repository or "/" in tag:
        return reference, "latest"
    return repository, tag


def repo_digest(image: EngineImage, repository: str) -> str | None:
    """The digest of `repository` among the image's RepoDigests (`repo@sha256:...`); None for a local build."""
    for entry in image.attrs.get("RepoDigests") or []:
        name, _, digest = str(entry).partition("@")
        if name == repository and digest:
            return digest
    return None


def resolve(client: Any, ref: ImageRef, *, refresh: bool) -> dict[str, Any]:
    """What the engine says about one image: status, new_digest, image_id, version label, reason. `refresh`
    pulls the tag first (a local build has nothing to pull). `client`: a docker SDK client, or None when no
    engine answers (then every image is unresolved)."""
    import docker.errors

    if client is None:
        return {"status": "unresolved", "reason": "no Docker engine answered"}
    pulled = False
    try:
        if refresh and not ref.local_build:
            client.images.pull(ref.repository, tag=ref.tag)
            pulled = True
        image = client.images.get(ref.tagged)
    except docker.errors.DockerException as exc:
        verb = "pull" if refresh and not ref.local_build and not pulled else "find"
        reason = f"could not {verb} {ref.tagged}: {str(exc).strip()[:300]}"
        return {"status": "unresolved", "reason": reason, "refreshed": False}
    digest = repo_digest(image, ref.repository)
    found: dict[str, Any] = {"image_id": image.id, "version_label": (image.labels or {}).get(VERSION_LABEL)}
    if ref.local_build:
        reason = "built on this machine: no registry digest (the image id identifies it)"
        return {**found, "status": "local_build", "new_digest": digest, "reason": reason}
    if digest is None:
        reason = f"{ref.tagged} is in the engine but has no RepoDigest for {ref.repository} (never pulled from it)"
        return {**found, "status": "unresolved", "reason": reason, "refreshed": pulled}
    return {**found, "status": "resolved", "new_digest": digest, "refreshed": pulled}


def previous_digest(previous: list[dict[str, Any]], stack: str, host: str, image: str) -> str | None:
    """The image the previous night ran for (stack, host, image as named): its pin, else its digest, else its
    image id (a matrix may run one stack from two images: each is compared with its own)."""
    for entry in previous:
        if (entry.get("stack"), entry.get("host"), entry.get("image", image)) == (stack, host, image):
            return entry.get("pinned_digest") or entry.get("new_digest") or entry.get("image_id")
    return None


def image_record(
    client: Any,
    spec: StackSpec,
    host: Host,
    override: str | None,
    *,
    refresh: bool,
    previous: list[dict[str, Any]],
) -> ImageRecord:
    """One stack config's image, resolved, with the previous night's digest and the release-notes link."""
    pinned = spec.images.get(host)
    if override:
        name, _, digest = override.partition("@")  # repo[:tag]@sha256:...: a pinned override
        repository, tag = split_reference(name)
        ref = ImageRef(repository=repository, tag=tag, digest=digest or None)
    elif pinned is not None:
        ref = pinned
    else:
        raise ValueError(f"stack {spec.name!r} has no {host} image and the matrix names none")
    found = resolve(client, ref, refresh=refresh)
    old = previous_digest(previous, spec.name, host, ref.tagged)
    pin = ref.digest
    notes = spec.release_notes  # no release_notes: no way to tell a release from a base image's label
    version = notes.version_of(ref.tag, found.get("version_label")) if notes else None
    return ImageRecord(
        stack=spec.name,
        host=host,
        image=ref.tagged,
        repository=ref.repository,
        tag=ref.tag,
        pinned_digest=pin,
        old_digest=old or pin,
        old_source="previous run" if old else ("stacks pin" if pin else None),
        release_notes=notes.link(version) if notes else None,
        version=version,
        **found,
    )


def engine_client() -> tuple[Any, str | None]:
    """A docker SDK client, or None and why not (the records then say every image is unresolved)."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        return None, str(exc)
    return client, None
