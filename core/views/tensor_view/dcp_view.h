// The part of a tensor view that shows a DCP / torch_dist checkpoint (core/views/tensor_view/
// dcp_metadata.h): at the view's root, one zarr array directory per tensor, whose chunks
// (core/views/tensor_view/tensor_grid.h) are ranges of the shards' storages inside the .distcp
// files (each shard a torch.save of one tensor, or its raw bytes); one file per byte item; their
// entries in info.json ("tensors", "items", "skipped").
#pragma once

#include <string>
#include <vector>

#include "core/views/tensor_view/dcp_metadata.h"
#include "core/views/tensor_view/view_tree.h"

namespace ckptfs {

// `sources`: the view's sources, found by their names. `path`: for logs.
void AddDcpView(const std::string& path, const DcpCheckpoint& ck, const std::vector<ViewSource>& sources,
                ViewTree& tree);

}  // namespace ckptfs
