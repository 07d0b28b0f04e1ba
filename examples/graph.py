"""A workflow graph: fetch a photo, then resize it, make a thumbnail and read
its metadata side by side (each gets the photo); publish once the resized
image and the thumbnail are both done (it gets both, in the order it names
them), and index the photo once its metadata and its publication are in.
Each step runs once, after every step it names; starting it again under the
same workflow ID is the same run.

python examples/graph.py                        # embedded store, one process
CHRONOS_URL=redis://127.0.0.1:6379/0 python examples/graph.py
"""

from __future__ import annotations

import os

import attrs
import trio

import chronos_trio
from chronos_trio import JobContext, graph


@attrs.frozen
class Photo:
    id: int
    width: int


app = chronos_trio.App(os.environ.get("CHRONOS_URL"))


@app.task("photos.fetch")
async def fetch(photo_id: int, job: JobContext) -> Photo:
    await trio.sleep(0.01)  # a download
    return Photo(photo_id, 4000)


@app.task("photos.resize")
async def resize(photo: Photo, job: JobContext) -> str:
    await trio.sleep(0.03)  # the slow one: finishes after the thumbnail
    return f"{photo.id}-1200.jpg"


@app.task("photos.thumbnail")
async def thumbnail(photo: Photo, job: JobContext) -> str:
    return f"{photo.id}-200.jpg"


@app.task("photos.metadata")
async def metadata(photo: Photo, job: JobContext) -> str:
    return f"{photo.width}px"


@app.task("photos.publish")
async def publish(files: list[str], job: JobContext) -> str:
    print(f"publish (resize, thumbnail): {files}")
    return f"https://photos.example/{files[0]}"


@app.task("photos.index")
async def index(parts: list[str], job: JobContext) -> str:
    print(f"index (metadata, publish): {parts}")
    return " ".join(parts)


def photo_graph(photo_id: int) -> chronos_trio.Graph:
    g = graph()
    g.add("fetch", fetch.s(photo_id))
    g.add("resize", resize.s(), after="fetch")
    g.add("thumbnail", thumbnail.s(), after="fetch")
    g.add("metadata", metadata.s(), after="fetch")
    g.add("publish", publish.s(), after=["resize", "thumbnail"])
    g.add("index", index.s(), after=["metadata", "publish"])
    return g


async def main() -> None:
    async with app.open_worker(poll_interval=0.2):
        started = await app.enqueue_workflow(photo_graph(7), workflow_id="photo-7")
        again = await app.enqueue_workflow(photo_graph(7), workflow_id="photo-7")
        print(f"graph {started.id}: {await started.result(timeout=30)}")
        print(f"the second start is the same run: {await again.result(timeout=5)}")


if __name__ == "__main__":
    trio.run(main)
