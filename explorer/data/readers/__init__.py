"""What the readers of every family share, in one place: JSON index files (``json_files``), COCO's polygon and
RLE masks (``coco_masks``) and the refs pickle read with no global resolved (``plain_pickle``)."""
