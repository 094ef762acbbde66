#include "core/util/result.h"

namespace fulcrum {

const char* error_code_name(ErrorCode code) {
    switch (code) {
        case ErrorCode::io:
            return "io";
        case ErrorCode::not_sqlite:
            return "not-sqlite";
        case ErrorCode::foreign_sqlite:
            return "foreign-sqlite";
        case ErrorCode::newer_schema:
            return "newer-schema";
        case ErrorCode::corrupt:
            return "corrupt";
        case ErrorCode::invalid_input:
            return "invalid-input";
        case ErrorCode::cancelled:
            return "cancelled";
    }
    return "unknown";
}

}  // namespace fulcrum
