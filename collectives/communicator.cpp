#include "collectives/communicator.h"

namespace sb {

const char* reduce_op_name(ReduceOp op) {
    switch (op) {
        case ReduceOp::sum: return "sum";
        case ReduceOp::avg: return "avg";
        case ReduceOp::max: return "max";
        case ReduceOp::min: return "min";
    }
    return "?";
}

}  // namespace sb
