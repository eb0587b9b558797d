#include "cli/app.h"

int main(int argc, char** argv) { return fp4serve::cli::run_app(argc, argv); }
