import OfflinePkgCLI

#if canImport(Glibc)
import Glibc
#endif

exit(await OfflinePkgCommand.main(Array(CommandLine.arguments.dropFirst())))
