# cmake -DIN=file -DOUT=file.c -P embed_text.cmake: a C array holding IN's bytes.
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE "${OUT}" "/* generated from ${IN}; do not edit */\nconst char fm_builtin_samples_text[] = {${bytes}0x00};\n")
