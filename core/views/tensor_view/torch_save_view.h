// The part of a tensor view that shows a torch.save file (core/views/tensor_view/torch_save.h),
// such as Megatron's model_optim_rng.pt and common.pt: a directory named as the file, with the
// nested dict keys and list indexes of what it pickled as directories (each with a .zgroup), and
// each tensor as a zarr array of one chunk whose bytes are its range of the storage inside the zip.
// Anything else is listed in info.json ("files") by type, and with its value when it is a number, a
// string, a bool or None; nothing is run. Bounded: 2^18 nodes, 10,000 objects and 1,000 skipped
// keys listed per file; a container met again inside itself is skipped.
#pragma once

#include <string>

#include "core/views/tensor_view/view_tree.h"

namespace ckptfs {

// Adds the view of source `index` of `sources` under the root, unless an entry of its name is
// there; a file that is no torch.save archive is listed in info.json's "skipped".
void AddTorchSaveView(const std::string& path, const std::vector<ViewSource>& sources, int32_t index,
                      ViewTree& tree);

}  // namespace ckptfs
